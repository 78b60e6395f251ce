{#- sys.fn_cdc_has_column_changed(capture_instance, column, mask). An unknown column is a compile
    error naming it (SQL Server would silently test ordinal -1). -#}
{% macro has_column_changed(capture_instance, column_name, mask) -%}
    {{ return(adapter.dispatch('has_column_changed', 'sqlserver_cdc')(capture_instance, column_name, mask)) }}
{%- endmacro %}

{% macro spark__has_column_changed(capture_instance, column_name, mask) -%}
    {%- set ordinal = sqlserver_cdc.column_ordinal(capture_instance, column_name) -%}
    {%- if ordinal == -1 -%}
        {{ exceptions.raise_compiler_error("has_column_changed: column '" ~ column_name ~ "' is not a captured column of capture instance '" ~ capture_instance ~ "'") }}
    {%- endif -%}
    {{ sqlserver_cdc.is_bit_set(mask, ordinal) }}
{%- endmacro %}

{% macro default__has_column_changed(capture_instance, column_name, mask) -%}
    {{ exceptions.raise_compiler_error(sqlserver_cdc._not_supported('has_column_changed')) }}
{%- endmacro %}
