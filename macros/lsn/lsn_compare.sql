{#- -1, 0 or 1 as canonical LSN a is below, equal to or above b; NULL if either is NULL. -#}
{% macro lsn_compare(a, b) -%}
    {{ return(adapter.dispatch('lsn_compare', 'sqlserver_cdc')(a, b)) }}
{%- endmacro %}

{% macro spark__lsn_compare(a, b) -%}
    (case when {{ a }} < {{ b }} then -1 when {{ a }} = {{ b }} then 0 when {{ a }} > {{ b }} then 1 end)
{%- endmacro %}

{% macro default__lsn_compare(a, b) -%}
    {{ exceptions.raise_compiler_error(sqlserver_cdc._not_supported('lsn_compare')) }}
{%- endmacro %}
