{#- Casts a text value (as landed, or as CES sends it) to the Spark type of a SQL Server type.
    NULL when it does not cast; cast_invalid_reason() names column and value for quarantine.
    binary values arrive as '0x..' hex (or base64 with encoding='base64'); bit accepts 1/0/true/false;
    datetimeoffset is converted to UTC; uniqueidentifier is upper-cased. -#}
{% macro cast_from_text(expr, sqlserver_type) -%}
    {{ return(adapter.dispatch('cast_from_text', 'sqlserver_cdc')(expr, sqlserver_type)) }}
{%- endmacro %}

{% macro spark__cast_from_text(expr, sqlserver_type) -%}
    {%- set spark = sqlserver_cdc.spark_type(sqlserver_type) -%}
    {%- set base = (sqlserver_type | lower).split('(')[0] | trim -%}
    {%- if spark == 'binary' -%}
        (case when {{ expr }} rlike '^0[xX]([0-9A-Fa-f]{2})*$' then unhex(substr({{ expr }}, 3)) end)
    {%- elif base == 'uniqueidentifier' -%}
        (case when {{ expr }} rlike '^\\{?[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12}\\}?$'
            then upper(regexp_replace({{ expr }}, '[{}]', '')) end)
    {%- elif base == 'time' -%}
        (case when {{ expr }} rlike '^[0-2][0-9]:[0-5][0-9](:[0-5][0-9](\\.[0-9]{1,7})?)?$' then {{ expr }} end)
    {%- elif spark == 'timestamp' -%}
        try_cast(regexp_replace(trim({{ expr }}), '^([0-9-]+)[ T]([0-9:]+(\\.[0-9]{1,6})?)[0-9]*\\s*', '$1 $2') as timestamp)
    {%- elif spark == 'string' -%}
        cast({{ expr }} as string)
    {%- else -%}
        try_cast(trim({{ expr }}) as {{ spark }})
    {%- endif -%}
{%- endmacro %}

{% macro default__cast_from_text(expr, sqlserver_type) -%}
    {{ exceptions.raise_compiler_error(sqlserver_cdc._not_supported('cast_from_text')) }}
{%- endmacro %}

{#- typed: an expression already holding cast_from_text(expr, type), to avoid writing it twice. -#}
{% macro cast_invalid_reason(expr, sqlserver_type, column_name, typed=none) -%}
    {{ return(adapter.dispatch('cast_invalid_reason', 'sqlserver_cdc')(expr=expr, sqlserver_type=sqlserver_type, column_name=column_name, typed=typed)) }}
{%- endmacro %}

{% macro spark__cast_invalid_reason(expr, sqlserver_type, column_name, typed=none) -%}
    (case when {{ expr }} is not null and {{ typed or sqlserver_cdc.cast_from_text(expr, sqlserver_type) }} is null
        then concat('column {{ column_name }}: value "', {{ expr }}, '" is not a valid {{ sqlserver_type }}') end)
{%- endmacro %}

{% macro default__cast_invalid_reason(expr, sqlserver_type, column_name, typed=none) -%}
    {{ exceptions.raise_compiler_error(sqlserver_cdc._not_supported('cast_invalid_reason')) }}
{%- endmacro %}
