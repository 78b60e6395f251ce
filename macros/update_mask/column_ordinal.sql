{#- sys.fn_cdc_get_column_ordinal(capture_instance, column): the declared captured-column ordinal
    of that capture instance (see cdc_tracked_tables), or -1 for an unknown column. Names compare
    case-insensitively, as in SQL Server. Resolved at compile time: the result is an integer literal. -#}
{% macro column_ordinal(capture_instance, column_name) -%}
    {{ return(adapter.dispatch('column_ordinal', 'sqlserver_cdc')(capture_instance, column_name)) }}
{%- endmacro %}

{% macro default__column_ordinal(capture_instance, column_name) -%}
    {%- for column in sqlserver_cdc._instance_columns(capture_instance) if column.name | lower == column_name | lower -%}
        {{ return(column.ordinal) }}
    {%- endfor -%}
    {{ return(-1) }}
{%- endmacro %}
