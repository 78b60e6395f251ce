{#- The MERGE that applies an incremental build of a mart (materialization cdc_mart; one commit).
    Current state: matched on the key, a deleted key is deleted (or, with soft_deletes, updated),
    a row not older than the stored one updates it, a new key is inserted unless deleted.
    History: matched on key and valid_from_lsn, upserted. Both: a removal row (operation NULL,
    returned by the key-rebuilding channels for what a rebuild no longer has) deletes its match
    and is never inserted. mart: 'current_state' | 'history'; evolve: add the columns the source
    has and the mart lacks (a column newly declared). -#}
{% macro mart_merge_sql(target, source, table_name, mart, evolve=false) -%}
    {{ return(adapter.dispatch('mart_merge_sql', 'sqlserver_cdc')(target, source, table_name, mart, evolve)) }}
{%- endmacro %}

{% macro spark__mart_merge_sql(target, source, table_name, mart, evolve=false) -%}
{%- set t = sqlserver_cdc._mart_table(sqlserver_cdc.tracked_table(table_name)) -%}
{%- if mart not in ('current_state', 'history') -%}
    {{ exceptions.raise_compiler_error("mart_merge_sql: mart must be 'current_state' or 'history'; got '" ~ mart ~ "'") }}
{%- endif -%}
{%- set match = t.key + (['valid_from_lsn'] if mart == 'history' else []) -%}
merge {{ 'with schema evolution ' if evolve }}into {{ target }} as dest
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

{% macro default__mart_merge_sql(target, source, table_name, mart, evolve=false) -%}
    {{ exceptions.raise_compiler_error(sqlserver_cdc._not_supported('mart_merge_sql')) }}
{%- endmacro %}
