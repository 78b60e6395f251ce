{#- The table holding each mart's watermark (var cdc_watermark_table, default cdc_watermarks in
    the target schema): one row per successful advance, the latest row per model wins. -#}
{% macro watermark_relation() -%}
    {{ return(api.Relation.create(
        database=none,
        schema=target.schema,
        identifier=var('cdc_watermark_table', 'cdc_watermarks'),
        type='table')) }}
{%- endmacro %}
