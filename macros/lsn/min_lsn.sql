{#- sys.fn_cdc_get_min_lsn(capture_instance): low end of the capture instance's validity
    interval (cdc.change_tables.start_lsn, latest landed export). NULL if unknown. -#}
{% macro min_lsn(capture_instance) -%}
    {{ return(adapter.dispatch('min_lsn', 'sqlserver_cdc')(capture_instance)) }}
{%- endmacro %}

{% macro spark__min_lsn(capture_instance) -%}
    (select max(start_lsn) from {{ ref('stg_cdc_metadata__change_tables') }}
        where lower(capture_instance) = lower('{{ capture_instance }}'))
{%- endmacro %}

{% macro default__min_lsn(capture_instance) -%}
    {{ exceptions.raise_compiler_error(sqlserver_cdc._not_supported('min_lsn')) }}
{%- endmacro %}
