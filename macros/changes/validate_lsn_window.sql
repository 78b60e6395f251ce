{#- A boolean SQL expression that is true when [from_lsn, to_lsn] lies inside the capture
    instance's validity interval [min_lsn(ci), max_lsn()], and otherwise fails the query with a
    message naming the capture instance, the requested bounds and the valid ones (where SQL
    Server answers with its unhelpful error 313). NULL bounds are not checked. -#}
{% macro validate_lsn_window(capture_instance, from_lsn, to_lsn) -%}
    {{ return(adapter.dispatch('validate_lsn_window', 'sqlserver_cdc')(capture_instance, from_lsn, to_lsn)) }}
{%- endmacro %}

{% macro spark__validate_lsn_window(capture_instance, from_lsn, to_lsn) -%}
    {%- set low = sqlserver_cdc.min_lsn(capture_instance) -%}
    {%- set high = sqlserver_cdc.max_lsn() -%}
    (case
        when ({{ from_lsn or 'null' }}) < coalesce({{ low }}, '')
            or ({{ to_lsn or 'null' }}) > coalesce({{ high }}, '')
            then raise_error(concat(
                'LSN window [', coalesce({{ from_lsn or 'null' }}, '-'), ', ', coalesce({{ to_lsn or 'null' }}, '-'),
                '] is outside the validity interval of capture instance {{ capture_instance }}: [',
                coalesce({{ low }}, 'unknown'), ', ', coalesce({{ high }}, 'unknown'),
                ']. Below the low end, cleanup removed changes; above the high end, changes are not captured yet.'
            ))
        else true
    end)
{%- endmacro %}

{% macro default__validate_lsn_window(capture_instance, from_lsn, to_lsn) -%}
    {{ exceptions.raise_compiler_error(sqlserver_cdc._not_supported('validate_lsn_window')) }}
{%- endmacro %}

{#- The rows of relation inside the closed window, with the validity check when asked. -#}
{% macro _lsn_window_select(relation, from_lsn, to_lsn, capture_instance) -%}
    select * from {{ relation }}
    where true
    {%- if from_lsn is not none %}
        and commit_lsn >= {{ from_lsn }}
    {%- endif %}
    {%- if to_lsn is not none %}
        and commit_lsn <= {{ to_lsn }}
    {%- endif %}
    {%- if capture_instance is not none and (from_lsn is not none or to_lsn is not none) %}
        and (select {{ sqlserver_cdc.validate_lsn_window(capture_instance, from_lsn, to_lsn) }})
    {%- endif %}
{%- endmacro %}
