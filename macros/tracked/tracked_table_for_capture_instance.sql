{#- The tracked-table declaration that has the capture instance (case-insensitive; a table may
    have several, see tracked_table). -#}
{% macro tracked_table_for_capture_instance(capture_instance) -%}
    {%- for name, table in var('cdc_tracked_tables', {}).items() if table.get('channel') == 'change_tables' -%}
        {%- set t = sqlserver_cdc.tracked_table(name) -%}
        {%- if capture_instance | lower in t.instances | map(attribute='name') | map('lower') | list -%}
            {{ return(t) }}
        {%- endif -%}
    {%- endfor -%}
    {{ exceptions.raise_compiler_error("capture instance '" ~ capture_instance ~ "' is not declared by any table in var cdc_tracked_tables") }}
{%- endmacro %}

{#- The columns (name, type, ordinal) capture instance `capture_instance` captures, with its
    ordinals. -#}
{% macro _instance_columns(capture_instance) -%}
    {%- for instance in sqlserver_cdc.tracked_table_for_capture_instance(capture_instance).instances
        if instance.name | lower == capture_instance | lower -%}
        {{ return(instance.columns) }}
    {%- endfor -%}
{%- endmacro %}
