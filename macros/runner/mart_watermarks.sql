{#- Used by begin_run (after ensure_watermark_table) to record a run with nothing to do: each
    mart's watermark and landing batch (the latest advance per model). -#}
{% macro mart_watermarks() -%}
    {{ return(adapter.dispatch('mart_watermarks', 'sqlserver_cdc')()) }}
{%- endmacro %}

{% macro spark__mart_watermarks() -%}
    select model_name, max_by(watermark_lsn, recorded_at) as watermark_lsn,
        max_by(watermark_batch, recorded_at) as watermark_batch
    from {{ sqlserver_cdc.watermark_relation() }}
    group by model_name
{%- endmacro %}

{% macro default__mart_watermarks() -%}
    {{ exceptions.raise_compiler_error(sqlserver_cdc._not_supported('mart_watermarks')) }}
{%- endmacro %}
