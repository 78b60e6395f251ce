{#- cdc.fn_cdc_get_all_changes_<ci>(from_lsn, to_lsn, row_filter) over a staged change relation:
    the closed window's rows in SQL Server order (commit_lsn, change_lsn, command_id, operation).
    row_filter 'all' leaves out update-before rows (op 3); 'all update old' keeps them, each
    before its op 4 partner. Arguments as in net_changes. -#}
{% macro all_changes(relation, columns, row_filter='all', from_lsn=none, to_lsn=none, capture_instance=none) -%}
    {{ return(adapter.dispatch('all_changes', 'sqlserver_cdc')(relation, columns, row_filter, from_lsn, to_lsn, capture_instance)) }}
{%- endmacro %}

{% macro spark__all_changes(relation, columns, row_filter, from_lsn, to_lsn, capture_instance) -%}
    {%- if row_filter not in ('all', 'all update old') -%}
        {{ exceptions.raise_compiler_error("all_changes: row_filter must be 'all' or 'all update old'; got '" ~ row_filter ~ "'") }}
    {%- endif -%}
    (
        with _changes as (
            {{ sqlserver_cdc._lsn_window_select(relation, from_lsn, to_lsn, capture_instance) }}
        )

        select
            commit_lsn,
            change_lsn,
            operation_code,
            update_mask{% for c in columns %},
            {{ c }}{% endfor %}
        from _changes
        {%- if row_filter == 'all' %}
        where operation_code != 3
        {%- endif %}
        order by commit_lsn, change_lsn, command_id, operation_code
    )
{%- endmacro %}

{% macro default__all_changes(relation, columns, row_filter, from_lsn, to_lsn, capture_instance) -%}
    {{ exceptions.raise_compiler_error(sqlserver_cdc._not_supported('all_changes')) }}
{%- endmacro %}
