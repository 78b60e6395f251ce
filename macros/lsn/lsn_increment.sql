{#- sys.fn_cdc_increment_lsn: +1 on the 80-bit value with carry; NULL past FFFF...FF.
    Input and output are canonical LSNs (see lsn_normalize). Works on two 40-bit halves. -#}
{% macro lsn_increment(lsn) -%}
    {{ return(adapter.dispatch('lsn_increment', 'sqlserver_cdc')(lsn)) }}
{%- endmacro %}

{% macro spark__lsn_increment(lsn) -%}
    (case
        when {{ lsn }} is null or {{ lsn }} = 'FFFFFFFFFFFFFFFFFFFF' then null
        when substr({{ lsn }}, 11, 10) = 'FFFFFFFFFF'
            then concat({{ sqlserver_cdc._lsn_half_add(lsn, 1, 1) }}, '0000000000')
        else concat(substr({{ lsn }}, 1, 10), {{ sqlserver_cdc._lsn_half_add(lsn, 11, 1) }})
    end)
{%- endmacro %}

{% macro default__lsn_increment(lsn) -%}
    {{ exceptions.raise_compiler_error(sqlserver_cdc._not_supported('lsn_increment')) }}
{%- endmacro %}

{#- The 10-hex-digit half of an LSN starting at `start`, plus `delta`, as 10 hex digits. -#}
{% macro _lsn_half_add(lsn, start, delta) -%}
    lpad(hex(cast(conv(substr({{ lsn }}, {{ start }}, 10), 16, 10) as bigint) + ({{ delta }})), 10, '0')
{%- endmacro %}
