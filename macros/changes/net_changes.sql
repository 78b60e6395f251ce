{#- cdc.fn_cdc_get_net_changes_<ci>(from_lsn, to_lsn, row_filter) over a staged change relation,
    exactly as SQL Server's generated function body computes it (reference section 5):
    per key, count = rows incl. update-before, last = latest of ops 1/2/4, first_op = earliest of
    ops 1/2/4, or_mask = OR of all masks; insert-then-delete returns nothing.
    One aggregation pass (max_by/min_by), no correlated subqueries.

    relation: a relation or CTE name with commit_lsn, change_lsn, command_id, operation_code
      (1-4), update_mask (binary) and the captured columns.
    key_columns: list of key column names (composite keys allowed). Extra grouping columns such
      as commit_lsn give per-transaction net changes.
    columns: the captured columns to return (key columns may be included; they are not repeated).
    row_filter: 'all' | 'all with mask' | 'all with merge'.
    from_lsn / to_lsn: SQL expressions of canonical LSNs, closed window; none = unbounded.
    capture_instance: when given with a window, a window outside the capture instance's validity
      interval fails the query with a message naming both (see validate_lsn_window).
    extra_columns: more columns carried from the last row (e.g. commit_time).
    Output: key columns, commit_lsn, operation_code, update_mask, columns, extra columns. -#}
{% macro net_changes(relation, key_columns, columns, row_filter='all', from_lsn=none, to_lsn=none,
                     capture_instance=none, extra_columns=[], max_mask_bytes=128) -%}
    {{ return(adapter.dispatch('net_changes', 'sqlserver_cdc')(relation, key_columns, columns, row_filter,
        from_lsn, to_lsn, capture_instance, extra_columns, max_mask_bytes)) }}
{%- endmacro %}

{% macro spark__net_changes(relation, key_columns, columns, row_filter, from_lsn, to_lsn,
                              capture_instance, extra_columns, max_mask_bytes) -%}
    {%- if row_filter not in ('all', 'all with mask', 'all with merge') -%}
        {{ exceptions.raise_compiler_error("net_changes: row_filter must be 'all', 'all with mask' or 'all with merge'; got '" ~ row_filter ~ "'") }}
    {%- endif -%}
    {%- if key_columns | length == 0 -%}
        {{ exceptions.raise_compiler_error("net_changes: key_columns is empty; net changes need the primary key or the unique index columns") }}
    {%- endif -%}
    {%- set keys_lower = key_columns | map('lower') | list -%}
    {%- set carried = [] -%}
    {%- for c in columns + extra_columns if c | lower not in keys_lower and c | lower != 'commit_lsn' -%}
        {%- do carried.append(c) -%}
    {%- endfor -%}
    {%- set order_key = 'struct(commit_lsn, change_lsn, command_id)' -%}
    {%- set last_op = '_last.operation_code' -%}
    (
        with _changes as (
            {{ sqlserver_cdc._lsn_window_select(relation, from_lsn, to_lsn, capture_instance) }}
        ),

        _by_key as (
            select
                {%- for k in key_columns %}
                {{ k }},
                {%- endfor %}
                count(*) as _row_count,
                max_by(
                    struct(
                        commit_lsn,
                        operation_code,
                        update_mask{% for c in carried %},
                        {{ c }}{% endfor %}
                    ),
                    {{ order_key }}
                ) filter (where operation_code in (1, 2, 4)) as _last,
                min_by(operation_code, {{ order_key }}) filter (where operation_code in (1, 2, 4)) as _first_op,
                {{ sqlserver_cdc.bit_or_masks('update_mask', max_mask_bytes) }} as _or_mask
            from _changes
            group by {{ key_columns | join(', ') }}
        )

        select
            {%- for k in key_columns %}
            {{ k }},
            {%- endfor %}
            {%- if 'commit_lsn' not in keys_lower %}
            _last.commit_lsn as commit_lsn,
            {%- endif %}
            {%- if row_filter == 'all with merge' %}
            case when {{ last_op }} = 1 then 1 else 5 end as operation_code,
            {%- else %}
            case
                when _row_count = 1 then {{ last_op }}
                when _first_op = 2 then 2
                when {{ last_op }} = 1 then 1
                else 4
            end as operation_code,
            {%- endif %}
            {%- if row_filter == 'all with mask' %}
            case
                when _row_count = 1 then case when {{ last_op }} = 4 then _last.update_mask end
                when _first_op = 2 or {{ last_op }} = 1 then null
                else _or_mask
            end as update_mask
            {%- else %}
            cast(null as binary) as update_mask
            {%- endif %}
            {%- for c in carried %},
            _last.{{ c }} as {{ c }}
            {%- endfor %}
        from _by_key
        where _last is not null and not (_first_op = 2 and {{ last_op }} = 1)
    )
{%- endmacro %}

{% macro default__net_changes(relation, key_columns, columns, row_filter, from_lsn, to_lsn,
                              capture_instance, extra_columns, max_mask_bytes) -%}
    {{ exceptions.raise_compiler_error(sqlserver_cdc._not_supported('net_changes')) }}
{%- endmacro %}
