{#- The table holding each model's watermark (var cdc_watermark_table, default cdc_watermarks in
    the target schema): the runner keeps one row per model (the latest row per model wins, so
    rows a plain dbt build appends count too). -#}
{% macro watermark_relation() -%}
    {{ return(api.Relation.create(
        database=none,
        schema=target.schema,
        identifier=var('cdc_watermark_table', 'cdc_watermarks'),
        type='table')) }}
{%- endmacro %}
