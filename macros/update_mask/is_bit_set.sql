{#- sys.fn_cdc_is_bit_set(ordinal, mask) with SQL Server's layout: the mask read as a big-endian
    integer, ordinal N is bit N-1, so ordinal 1 is the lowest bit of the LAST byte. An ordinal
    beyond the mask's length is not set (SUBSTRING past the start is empty). NULL mask: NULL. -#}
{% macro is_bit_set(mask, ordinal) -%}
    {{ return(adapter.dispatch('is_bit_set', 'sqlserver_cdc')(mask, ordinal)) }}
{%- endmacro %}

{% macro spark__is_bit_set(mask, ordinal) -%}
    {%- set byte_pos = '(octet_length(' ~ mask ~ ') - 1 - ((' ~ ordinal ~ ') - 1) div 8)' -%}
    (case
        when {{ mask }} is null or ({{ ordinal }}) is null then null
        when ({{ ordinal }}) < 1 or {{ byte_pos }} < 0 then false
        else (
            cast(conv(hex(substr({{ mask }}, {{ byte_pos }} + 1, 1)), 16, 10) as int)
            & shiftleft(1, cast((({{ ordinal }}) - 1) % 8 as int))
        ) != 0
    end)
{%- endmacro %}

{% macro default__is_bit_set(mask, ordinal) -%}
    {{ exceptions.raise_compiler_error(sqlserver_cdc._not_supported('is_bit_set')) }}
{%- endmacro %}
