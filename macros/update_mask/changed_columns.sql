{#- The names of the captured columns whose bit is set in the mask, as array<string> in ordinal
    order. NULL mask gives NULL. -#}
{% macro changed_columns(mask, capture_instance) -%}
    {{ return(adapter.dispatch('changed_columns', 'sqlserver_cdc')(mask, capture_instance)) }}
{%- endmacro %}

{% macro spark__changed_columns(mask, capture_instance) -%}
    {{ return(sqlserver_cdc._changed_columns_of(mask, sqlserver_cdc._instance_columns(capture_instance))) }}
{%- endmacro %}

{% macro default__changed_columns(mask, capture_instance) -%}
    {{ exceptions.raise_compiler_error(sqlserver_cdc._not_supported('changed_columns')) }}
{%- endmacro %}

{#- changed_columns over a list of declared columns (name, ordinal), for any channel: each column's
    name when its bit is set, the others dropped (one bit test per column, no lambda over the
    list, so the expression stays linear in the number of columns). -#}
{% macro _changed_columns_of(mask, columns) -%}
    {%- set columns = columns | sort(attribute='ordinal') -%}
    (case when {{ mask }} is not null then array_compact(array(
        {%- for c in columns %}
        case when {{ sqlserver_cdc.is_bit_set(mask, c.ordinal) }} then {{ "'" ~ c.name ~ "'" }} end{{ "," if not loop.last }}
        {%- endfor %}
    )) end)
{%- endmacro %}
