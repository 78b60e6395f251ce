{#- The MERGE that applies an incremental run of a mart (incremental_strategy merge; one commit).
    Current state: matched on the key, a deleted key is deleted (or, with soft_deletes, updated),
    a row not older than the stored one updates it, a new key is inserted unless deleted.
    History: matched on key and valid_from_lsn, upserted. Both: a removal row (operation NULL,
    returned by the key-rebuilding channels for what a rebuild no longer has) deletes its match
    and is never inserted. mart: 'current_state' | 'history'. -#}
{% macro mart_merge_sql(target, source, table_name, mart) -%}
    {{ return(adapter.dispatch('mart_merge_sql', 'sqlserver_cdc')(target, source, table_name, mart)) }}
{%- endmacro %}

{% macro spark__mart_merge_sql(target, source, table_name, mart) -%}
{%- set t = sqlserver_cdc.tracked_table(table_name) -%}
{%- if mart not in ('current_state', 'history') -%}
    {{ exceptions.raise_compiler_error("mart_merge_sql: mart must be 'current_state' or 'history'; got '" ~ mart ~ "'") }}
{%- endif -%}
{%- set match = t.key + (['valid_from_lsn'] if mart == 'history' else []) -%}
merge into {{ target }} as dest
using {{ source }} as src
on {% for c in match %}src.{{ c }} = dest.{{ c }}{{ ' and ' if not loop.last }}{% endfor %}
when matched and src.operation is null then delete
{%- if mart == 'current_state' %}
{%- if not t.soft_deletes %}
when matched and src.is_deleted and src.commit_lsn >= dest.commit_lsn then delete
{%- endif %}
when matched and src.commit_lsn >= dest.commit_lsn then update set *
when not matched and src.operation is not null{{ ' and not src.is_deleted' if not t.soft_deletes }} then insert *
{%- else %}
when matched then update set *
when not matched and src.operation is not null then insert *
{%- endif %}
{%- endmacro %}

{% macro default__mart_merge_sql(target, source, table_name, mart) -%}
    {{ exceptions.raise_compiler_error(sqlserver_cdc._not_supported('mart_merge_sql')) }}
{%- endmacro %}

{#- dbt-spark's merge strategy, taken over for the marts (which need deletes); every other model
    keeps dbt-spark's merge. Active through the root project's dispatch config for namespace
    'dbt' (docs/operations.md "Storage: Delta Lake"). -#}
{% macro spark__get_merge_sql(target, source, unique_key, dest_columns, incremental_predicates) -%}
    {%- set meta = config.get('meta') or {} -%}
    {%- if meta.get('cdc_mart') -%}
        {{ return(sqlserver_cdc.mart_merge_sql(target, source, meta.cdc_table, meta.cdc_mart)) }}
    {%- endif -%}
    {{ return(dbt.spark__get_merge_sql(target, source, unique_key, dest_columns, incremental_predicates)) }}
{%- endmacro %}
