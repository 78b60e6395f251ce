{#- Canonical LSN: 20 uppercase hex digits (the binary(10) value, big-endian), so string order
    is LSN order. Accepts binary(10), '0x'-prefixed or bare 20-hex text, Debezium / CES
    'xxxxxxxx:xxxxxxxx:xxxx', CES logicalid '<guid>:<20 hex>:<20 digits>', and numeric LSNs
    (decimal digits, any length but 20: a 20-digit string is read as hex). Anything else gives
    NULL; pair with lsn_invalid_reason() to route the row to quarantine. -#}
{% macro lsn_normalize(expr, input_type='auto') -%}
    {{ return(adapter.dispatch('lsn_normalize', 'sqlserver_cdc')(expr, input_type)) }}
{%- endmacro %}

{% macro spark__lsn_normalize(expr, input_type) -%}
    {%- set t = sqlserver_cdc._lsn_text(expr, input_type) -%}
    (case
        when {{ t }} rlike '^(0[xX])?[0-9A-Fa-f]{20}$' then upper(right({{ t }}, 20))
        when {{ t }} rlike '^[0-9A-Fa-f]{8}:[0-9A-Fa-f]{8}:[0-9A-Fa-f]{4}$'
            then upper(replace({{ t }}, ':', ''))
        when {{ t }} rlike '^[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12}:[0-9A-Fa-f]{20}:[0-9]{1,20}$'
            then upper(substr({{ t }}, 38, 20))
        when {{ t }} rlike '^[0-9]{1,25}$' then {{ sqlserver_cdc._lsn_from_numeric_text(t) }}
    end)
{%- endmacro %}

{% macro default__lsn_normalize(expr, input_type) -%}
    {{ exceptions.raise_compiler_error(sqlserver_cdc._not_supported('lsn_normalize')) }}
{%- endmacro %}

{#- Text of an LSN expression: binary becomes hex, strings are trimmed. input_type 'string' or
    'binary' skips the run-time type test (smaller plans when the caller knows the type). -#}
{% macro _lsn_text(expr, input_type='auto') -%}
    {%- if input_type == 'string' -%}
        trim({{ expr }})
    {%- elif input_type == 'binary' -%}
        hex({{ expr }})
    {%- else -%}
        (case when typeof({{ expr }}) = 'binary' then hex({{ expr }}) else trim(cast({{ expr }} as string)) end)
    {%- endif -%}
{%- endmacro %}

{#- Numeric LSN (Microsoft's fn_convertnumericlsntobinary): vlf = n / 10^15,
    block = (n mod 10^15) / 10^5, slot = n mod 10^5; NULL when a part overflows its field. -#}
{% macro _lsn_from_numeric_text(t) -%}
    {%- set n = 'cast(' ~ t ~ ' as decimal(38, 0))' -%}
    (case
        when {{ n }} div 1000000000000000 <= 4294967295
            and ({{ n }} % 1000000000000000) div 100000 <= 4294967295
            and {{ n }} % 100000 <= 65535
            then concat(
                lpad(hex(cast({{ n }} div 1000000000000000 as bigint)), 8, '0'),
                lpad(hex(cast(({{ n }} % 1000000000000000) div 100000 as bigint)), 8, '0'),
                lpad(hex(cast({{ n }} % 100000 as bigint)), 4, '0')
            )
    end)
{%- endmacro %}
