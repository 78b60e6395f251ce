{#- The Spark type for a SQL Server type name ('int', 'nvarchar(50)', 'decimal(18,2)', ...).
    The seed sqlserver_types documents the same mapping; a test keeps them equal.
    Unknown types are a compile error naming the type. -#}
{% macro spark_type(sqlserver_type) -%}
    {%- set mapped = adapter.dispatch('spark_type', 'sqlserver_cdc')(sqlserver_type) -%}
    {%- if mapped is none -%}
        {{ exceptions.raise_compiler_error("spark_type: unsupported SQL Server type '" ~ sqlserver_type ~ "' (supported: "
            ~ sqlserver_cdc._supported_types() ~ ")") }}
    {%- endif -%}
    {{ return(mapped) }}
{%- endmacro %}

{#- The SQL Server type names spark_type maps, for error messages. -#}
{% macro _supported_types() -%}
    {{ return('int bigint smallint tinyint bit decimal(p,s) numeric(p,s) money smallmoney float real date datetime '
        ~ 'datetime2(n) smalldatetime datetimeoffset time char varchar nchar nvarchar text ntext xml sysname '
        ~ 'uniqueidentifier binary varbinary image timestamp rowversion') }}
{%- endmacro %}

{#- The Spark type, or none for a type it does not map (spark_type raises then). -#}
{% macro spark__spark_type(sqlserver_type) -%}
    {%- set t = sqlserver_type | lower | replace(' ', '') -%}
    {%- set base = t.split('(')[0] -%}
    {%- set args = t.split('(')[1].rstrip(')').split(',') if '(' in t else [] -%}
    {%- set simple = {
        'bigint': 'bigint', 'int': 'int', 'smallint': 'smallint', 'tinyint': 'smallint',
        'bit': 'boolean', 'money': 'decimal(19,4)', 'smallmoney': 'decimal(10,4)',
        'float': 'double', 'real': 'float', 'date': 'date',
        'datetime': 'timestamp', 'datetime2': 'timestamp', 'smalldatetime': 'timestamp',
        'datetimeoffset': 'timestamp', 'time': 'string',
        'char': 'string', 'varchar': 'string', 'nchar': 'string', 'nvarchar': 'string',
        'text': 'string', 'ntext': 'string', 'xml': 'string', 'sysname': 'string',
        'uniqueidentifier': 'string',
        'binary': 'binary', 'varbinary': 'binary', 'image': 'binary',
        'timestamp': 'binary', 'rowversion': 'binary',
    } -%}
    {%- if base in ('decimal', 'numeric') -%}
        {%- set precision = (args[0] if args else '18') | int -%}
        {%- set scale = (args[1] if args | length > 1 else '0') | int -%}
        {{ return('decimal(' ~ precision ~ ',' ~ scale ~ ')') }}
    {%- elif base in simple -%}
        {{ return(simple[base]) }}
    {%- endif -%}
    {{ return(none) }}
{%- endmacro %}

{% macro default__spark_type(sqlserver_type) -%}
    {{ exceptions.raise_compiler_error(sqlserver_cdc._not_supported('spark_type')) }}
{%- endmacro %}
