{#- Used by the runner to skip a build that has nothing to do: each mart's watermark and landing
    batch (the latest advance per model); no rows before the watermark table exists. -#}
{% macro mart_watermarks() -%}
    {%- set relation = sqlserver_cdc.watermark_relation() -%}
    {%- if execute and adapter.get_relation(relation.database, relation.schema, relation.identifier) is none -%}
    select cast(null as string) as model_name, cast(null as string) as watermark_lsn,
        cast(null as string) as watermark_batch where false
    {%- else -%}
    select model_name, max_by(watermark_lsn, recorded_at) as watermark_lsn,
        max_by(watermark_batch, recorded_at) as watermark_batch
    from {{ relation }}
    group by model_name
    {%- endif -%}
{%- endmacro %}
