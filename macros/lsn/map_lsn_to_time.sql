{#- sys.fn_cdc_map_lsn_to_time: the commit time (tran_end_time) of a canonical commit LSN, as a
    scalar subquery over the landed cdc.lsn_time_mapping; NULL when the LSN is not a commit LSN. -#}
{% macro map_lsn_to_time(lsn) -%}
    {{ return(adapter.dispatch('map_lsn_to_time', 'sqlserver_cdc')(lsn)) }}
{%- endmacro %}

{% macro spark__map_lsn_to_time(lsn) -%}
    (select max(tran_end_time) from {{ ref('stg_cdc_metadata__lsn_time_mapping') }}
        where start_lsn = {{ lsn }})
{%- endmacro %}

{% macro default__map_lsn_to_time(lsn) -%}
    {{ exceptions.raise_compiler_error(sqlserver_cdc._not_supported('map_lsn_to_time')) }}
{%- endmacro %}
