{#- Post-hook of the marts (insert_overwrite): drops the partitions (_bucket) that hold only the
    NULL-key row an incremental run writes for a bucket whose last row it removed (see
    _emptied_bucket_rows), so a deleted key cannot survive in a partition the overwrite skipped.
    A no-op for other models, full refreshes and the MERGE path. -#}
{% macro drop_emptied_buckets() -%}
    {{ return(adapter.dispatch('drop_emptied_buckets', 'sqlserver_cdc')()) }}
{%- endmacro %}

{% macro default__drop_emptied_buckets() -%}
    {%- if not execute -%}
        {{ return('select 1') }}
    {%- endif -%}
    {%- set table_name = (model.config.meta or {}).get('cdc_table') -%}
    {%- if not table_name or model.config.incremental_strategy == 'merge' -%}
        {{ return('select 1') }}
    {%- endif -%}
    {%- set t = sqlserver_cdc.tracked_table(table_name) -%}
    {%- set emptied = run_query('select _bucket from ' ~ this ~ ' group by _bucket having count_if('
        ~ t.key[0] ~ ' is not null) = 0').columns[0].values() -%}
    {%- if emptied | length == 0 -%}
        {{ return('select 1') }}
    {%- endif -%}
    alter table {{ this }} drop if exists
    {%- for bucket in emptied %} partition (_bucket = {{ bucket }}){{ ',' if not loop.last }}{% endfor %}
{%- endmacro %}
