{#- Time travel: a tracked table's state as of a commit LSN or a point in time, from its history
    mart (a subquery to select from). With `at` (a timestamp expression) the LSN is the largest
    commit LSN committed at or before it (map_time_to_lsn 'largest less than or equal').
    A state past the history mart's watermark is the state as of the watermark.
    Example: select * from {{ sqlserver_cdc.as_of('customers', at="timestamp'2026-11-01 09:00:00'") }} -#}
{% macro as_of(table_name, lsn=none, at=none) -%}
    {{ return(adapter.dispatch('as_of', 'sqlserver_cdc')(table_name, lsn, at)) }}
{%- endmacro %}

{% macro spark__as_of(table_name, lsn, at) -%}
    {%- set t = sqlserver_cdc.tracked_table(table_name) -%}
    {%- if (lsn is none) == (at is none) -%}
        {{ exceptions.raise_compiler_error("as_of('" ~ table_name ~ "'): give exactly one of lsn (a canonical LSN expression) or at (a timestamp expression)") }}
    {%- endif -%}
    {%- set point = lsn if lsn is not none else sqlserver_cdc.map_time_to_lsn('largest less than or equal', at) -%}
    (
        select
            {%- for c in t.columns %}
            {{ c.name }},
            {%- endfor %}
            valid_from_lsn as commit_lsn,
            valid_from as commit_time
        from {{ ref(table_name ~ '_history') }}
        where valid_from_lsn <= {{ point }}
            and (valid_to_lsn is null or valid_to_lsn > {{ point }})
            and not is_deleted
    )
{%- endmacro %}

{% macro default__as_of(table_name, lsn, at) -%}
    {{ exceptions.raise_compiler_error(sqlserver_cdc._not_supported('as_of')) }}
{%- endmacro %}
