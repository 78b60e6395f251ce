{#- on-run-start hook: creates the target schema and the watermark table if missing (and adds
    watermark_batch to a table created before event channels existed). -#}
{% macro ensure_watermark_table() -%}
    {{ return(adapter.dispatch('ensure_watermark_table', 'sqlserver_cdc')()) }}
{%- endmacro %}

{% macro default__ensure_watermark_table() -%}
    {%- set relation = sqlserver_cdc.watermark_relation() -%}
    {% do run_query('create schema if not exists ' ~ relation.schema) %}
    {%- if execute -%}
        {%- set existing = adapter.get_relation(relation.database, relation.schema, relation.identifier) -%}
        {%- if existing is not none
            and 'watermark_batch' not in (adapter.get_columns_in_relation(existing) | map(attribute='name') | list) -%}
            {% do run_query('alter table ' ~ relation ~ ' add columns (watermark_batch string)') %}
        {%- endif -%}
    {%- endif %}
    create table if not exists {{ relation }} (
        model_name string,
        watermark_lsn string,
        invocation_id string,
        recorded_at timestamp,
        watermark_batch string
    ) using delta
{%- endmacro %}
