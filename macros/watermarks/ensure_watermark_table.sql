{#- on-run-start hook: creates the target schema and the watermark table if missing. -#}
{% macro ensure_watermark_table() -%}
    {{ return(adapter.dispatch('ensure_watermark_table', 'sqlserver_cdc')()) }}
{%- endmacro %}

{% macro spark__ensure_watermark_table() -%}
    {%- set relation = sqlserver_cdc.watermark_relation() -%}
    {% do run_query('create schema if not exists ' ~ relation.schema) %}
    create table if not exists {{ relation }} (
        model_name string,
        watermark_lsn string,
        invocation_id string,
        recorded_at timestamp,
        watermark_batch string
    ) using delta
{%- endmacro %}

{% macro default__ensure_watermark_table() -%}
    {{ exceptions.raise_compiler_error(sqlserver_cdc._not_supported('ensure_watermark_table')) }}
{%- endmacro %}
