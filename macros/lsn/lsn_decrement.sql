{#- sys.fn_cdc_decrement_lsn: -1 on the 80-bit value with borrow; NULL below 0000...00. -#}
{% macro lsn_decrement(lsn) -%}
    {{ return(adapter.dispatch('lsn_decrement', 'sqlserver_cdc')(lsn)) }}
{%- endmacro %}

{% macro spark__lsn_decrement(lsn) -%}
    (case
        when {{ lsn }} is null or {{ lsn }} = '00000000000000000000' then null
        when substr({{ lsn }}, 11, 10) = '0000000000'
            then concat({{ sqlserver_cdc._lsn_half_add(lsn, 1, -1) }}, 'FFFFFFFFFF')
        else concat(substr({{ lsn }}, 1, 10), {{ sqlserver_cdc._lsn_half_add(lsn, 11, -1) }})
    end)
{%- endmacro %}

{% macro default__lsn_decrement(lsn) -%}
    {{ exceptions.raise_compiler_error(sqlserver_cdc._not_supported('lsn_decrement')) }}
{%- endmacro %}
