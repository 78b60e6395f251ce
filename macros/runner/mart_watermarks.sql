{#- Used by the runner to skip a build that has nothing to do: each mart's watermark (the latest
    advance per model); no rows before the watermark table exists. -#}
{% macro mart_watermarks() -%}
    {%- set relation = sqlserver_cdc.watermark_relation() -%}
    {%- if execute and adapter.get_relation(relation.database, relation.schema, relation.identifier) is none -%}
    select cast(null as string) as model_name, cast(null as string) as watermark_lsn where false
    {%- else -%}
    select model_name, max_by(watermark_lsn, recorded_at) as watermark_lsn
    from {{ relation }}
    group by model_name
    {%- endif -%}
{%- endmacro %}
