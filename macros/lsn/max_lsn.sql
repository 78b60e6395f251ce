{#- sys.fn_cdc_get_max_lsn(): the capture high-water mark, the largest start_lsn landed in
    cdc.lsn_time_mapping. -#}
{% macro max_lsn() -%}
    {{ return(adapter.dispatch('max_lsn', 'sqlserver_cdc')()) }}
{%- endmacro %}

{% macro spark__max_lsn() -%}
    (select max(start_lsn) from {{ ref('stg_cdc_metadata__lsn_time_mapping') }})
{%- endmacro %}

{% macro default__max_lsn() -%}
    {{ exceptions.raise_compiler_error(sqlserver_cdc._not_supported('max_lsn')) }}
{%- endmacro %}
