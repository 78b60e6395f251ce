{#- on-run-start hook of a plain dbt build (the runner's begin_run does the same): creates the
    target schema and the watermark table if missing, and adds the declaration column a table of
    an earlier release lacks. -#}
{% macro ensure_watermark_table() -%}
    {{ return(adapter.dispatch('ensure_watermark_table', 'sqlserver_cdc')()) }}
{%- endmacro %}

{% macro spark__ensure_watermark_table() -%}
    {%- if execute and var('cdc_plan', none) is none -%}
        {% do sqlserver_cdc._ensure_watermarks() %}
    {%- endif -%}
    select 1
{%- endmacro %}

{% macro default__ensure_watermark_table() -%}
    {{ exceptions.raise_compiler_error(sqlserver_cdc._not_supported('ensure_watermark_table')) }}
{%- endmacro %}

{#- The watermark table (see watermark_relation): model_name, watermark_lsn (marts: the LSN they
    applied up to), invocation_id (the run or dbt invocation that recorded it), recorded_at,
    watermark_batch (staging and event-channel marts: the last landing batch taken in),
    declaration (a digest of the table's declaration the model was built with), source_database
    (a mart's watermark in one of its table's databases, docs/tables.md "Several databases":
    NULL for the default database's, and for every other model). Adds the columns a table of an
    earlier release lacks. -#}
{% macro _ensure_watermarks() -%}
    {%- set relation = sqlserver_cdc.watermark_relation() -%}
    {% do run_query('create schema if not exists ' ~ relation.schema) %}
    {% do run_query('create table if not exists ' ~ relation ~ ' (model_name string, watermark_lsn string, invocation_id string,'
        ~ ' recorded_at timestamp, watermark_batch string, declaration string, source_database string) using delta') %}
    {%- set present = run_query('describe table ' ~ relation).columns[0].values() -%}
    {%- for column in ['declaration', 'source_database'] if column not in present -%}
        {% do run_query('alter table ' ~ relation ~ ' add columns (' ~ column ~ ' string)') %}
    {%- endfor -%}
{%- endmacro %}
