{#- Renders a canonical LSN in one of the forms users meet: 'tsql' (0x0000002C00000300017C),
    'debezium' (0000002c:00000300:017c), 'ces' (0000002C:00000300:017C), 'numeric' (decimal). -#}
{% macro lsn_format(lsn, form) -%}
    {{ return(adapter.dispatch('lsn_format', 'sqlserver_cdc')(lsn, form)) }}
{%- endmacro %}

{% macro spark__lsn_format(lsn, form) -%}
    {%- if form == 'tsql' -%}
        concat('0x', {{ lsn }})
    {%- elif form in ('debezium', 'ces') -%}
        {%- set text = "concat_ws(':', substr(" ~ lsn ~ ", 1, 8), substr(" ~ lsn ~ ", 9, 8), substr(" ~ lsn ~ ", 17, 4))" -%}
        {{ 'lower(' ~ text ~ ')' if form == 'debezium' else text }}
    {%- elif form == 'numeric' -%}
        cast(
            cast(conv(substr({{ lsn }}, 1, 8), 16, 10) as decimal(38, 0)) * 1000000000000000
            + cast(conv(substr({{ lsn }}, 9, 8), 16, 10) as decimal(38, 0)) * 100000
            + cast(conv(substr({{ lsn }}, 17, 4), 16, 10) as decimal(38, 0))
        as decimal(38, 0))
    {%- else -%}
        {{ exceptions.raise_compiler_error("lsn_format: form must be one of 'tsql', 'debezium', 'ces', 'numeric', got '" ~ form ~ "'") }}
    {%- endif -%}
{%- endmacro %}

{% macro default__lsn_format(lsn, form) -%}
    {{ exceptions.raise_compiler_error(sqlserver_cdc._not_supported('lsn_format')) }}
{%- endmacro %}
