{#- The tracked-table declaration whose capture instance matches (case-insensitive). -#}
{% macro tracked_table_for_capture_instance(capture_instance) -%}
    {%- for name, table in var('cdc_tracked_tables', {}).items()
        if (table.get('capture_instance') or '') | lower == capture_instance | lower -%}
        {{ return(sqlserver_cdc.tracked_table(name)) }}
    {%- endfor -%}
    {{ exceptions.raise_compiler_error("capture instance '" ~ capture_instance ~ "' is not declared by any table in var cdc_tracked_tables") }}
{%- endmacro %}
