{#- Canonical operation vocabulary for every channel:
    'delete' (1), 'insert' (2), 'update_before' (3), 'update_after' (4), 'snapshot' (Debezium r).
    decode_operation returns the name, NULL for an unknown code (quarantine it, never guess).
    The seed cdc_operations holds the same table for joins and docs; a test keeps them equal. -#}
{% macro operation_codes() -%}
    {{ return({
        'change_tables': {'1': 'delete', '2': 'insert', '3': 'update_before', '4': 'update_after'},
        'ces': {'INS': 'insert', 'UPD': 'update_after', 'DEL': 'delete'},
        'debezium': {'c': 'insert', 'u': 'update_after', 'd': 'delete', 'r': 'snapshot'},
    }) }}
{%- endmacro %}

{% macro decode_operation(code_expr, channel) -%}
    {{ return(adapter.dispatch('decode_operation', 'sqlserver_cdc')(code_expr, channel)) }}
{%- endmacro %}

{% macro spark__decode_operation(code_expr, channel) -%}
    {%- set codes = sqlserver_cdc.operation_codes() -%}
    {%- if channel not in codes -%}
        {{ exceptions.raise_compiler_error("decode_operation: channel must be one of " ~ (codes.keys() | list | join(', ')) ~ "; got '" ~ channel ~ "'") }}
    {%- endif -%}
    (case {{ sqlserver_cdc._operation_code_text(code_expr, channel) }}
        {%- for code, name in codes[channel].items() %}
        when '{{ code }}' then '{{ name }}'
        {%- endfor %}
    end)
{%- endmacro %}

{% macro default__decode_operation(code_expr, channel) -%}
    {{ exceptions.raise_compiler_error(sqlserver_cdc._not_supported('decode_operation')) }}
{%- endmacro %}

{#- Change-table codes may arrive as '2', '2.0' or 2; CES and Debezium codes are compared as sent. -#}
{% macro _operation_code_text(code_expr, channel) -%}
    {%- if channel == 'change_tables' -%}
        regexp_replace(trim(cast({{ code_expr }} as string)), '\\.0+$', '')
    {%- else -%}
        trim(cast({{ code_expr }} as string))
    {%- endif -%}
{%- endmacro %}
