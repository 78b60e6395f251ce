{#- The watermark of the current model as a scalar subquery: the upper LSN of its last run whose
    model and tests succeeded, '' (below every LSN) when it never advanced. -#}
{% macro mart_lower_lsn() -%}
    {{ return(adapter.dispatch('mart_lower_lsn', 'sqlserver_cdc')()) }}
{%- endmacro %}

{% macro spark__mart_lower_lsn() -%}
    (select coalesce(max_by(watermark_lsn, recorded_at), '')
        from {{ sqlserver_cdc.watermark_relation() }}
        where model_name = '{{ this.identifier }}')
{%- endmacro %}

{% macro default__mart_lower_lsn() -%}
    {{ exceptions.raise_compiler_error(sqlserver_cdc._not_supported('mart_lower_lsn')) }}
{%- endmacro %}

{#- The landing batch the current model last took in (event channels), '' when none. -#}
{% macro mart_lower_batch() -%}
    {{ return(adapter.dispatch('mart_lower_batch', 'sqlserver_cdc')()) }}
{%- endmacro %}

{% macro spark__mart_lower_batch() -%}
    (select coalesce(max_by(watermark_batch, recorded_at), '')
        from {{ sqlserver_cdc.watermark_relation() }}
        where model_name = '{{ this.identifier }}')
{%- endmacro %}

{% macro default__mart_lower_batch() -%}
    {{ exceptions.raise_compiler_error(sqlserver_cdc._not_supported('mart_lower_batch')) }}
{%- endmacro %}
