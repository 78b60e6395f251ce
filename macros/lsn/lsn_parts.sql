{#- Splits a canonical LSN into struct<vlf: bigint, block: bigint, slot: int>. -#}
{% macro lsn_parts(lsn) -%}
    {{ return(adapter.dispatch('lsn_parts', 'sqlserver_cdc')(lsn)) }}
{%- endmacro %}

{% macro spark__lsn_parts(lsn) -%}
    (case when {{ lsn }} is not null then named_struct(
        'vlf', cast(conv(substr({{ lsn }}, 1, 8), 16, 10) as bigint),
        'block', cast(conv(substr({{ lsn }}, 9, 8), 16, 10) as bigint),
        'slot', cast(conv(substr({{ lsn }}, 17, 4), 16, 10) as int)
    ) end)
{%- endmacro %}

{% macro default__lsn_parts(lsn) -%}
    {{ exceptions.raise_compiler_error(sqlserver_cdc._not_supported('lsn_parts')) }}
{%- endmacro %}
