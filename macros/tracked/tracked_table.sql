{#- The declaration of a tracked table (var cdc_tracked_tables), validated, with defaults filled:
    name, channel (change_tables | ces), capture_instance (change tables only), source_database,
    source_schema, source_table (how CES events are routed), key (list), columns (name, type, ordinal), buckets,
    soft_deletes, history_delete_versions, history_columns (the columns whose changes open a new
    history version; none means every column). Fails with a message naming the table and the bad field. -#}
{% macro tracked_table(table_name) -%}
    {%- set tables = var('cdc_tracked_tables', {}) -%}
    {%- if table_name not in tables -%}
        {{ exceptions.raise_compiler_error("tracked table '" ~ table_name ~ "' is not declared in var cdc_tracked_tables (declared: " ~ (tables.keys() | list | join(', ')) ~ ")") }}
    {%- endif -%}
    {%- set raw = tables[table_name] -%}
    {%- set channels = {'change_tables': ['capture_instance'], 'ces': ['source_schema', 'source_table']} -%}
    {%- if raw.get('channel') not in channels -%}
        {{ exceptions.raise_compiler_error("tracked table '" ~ table_name ~ "': channel must be one of " ~ (channels.keys() | list | join(', ')) ~ "; got '" ~ raw.get('channel') ~ "'") }}
    {%- endif -%}
    {%- for field in ['key', 'columns'] + channels[raw.channel] if field not in raw -%}
        {{ exceptions.raise_compiler_error("tracked table '" ~ table_name ~ "': missing '" ~ field ~ "' (channel " ~ raw.channel ~ ")") }}
    {%- endfor -%}
    {%- set names = raw.columns | map(attribute='name') | map('lower') | list -%}
    {%- for column in raw.columns -%}
        {%- if column.name is not defined or column.type is not defined or column.ordinal is not defined -%}
            {{ exceptions.raise_compiler_error("tracked table '" ~ table_name ~ "': every column needs name, type and ordinal; got " ~ column) }}
        {%- endif -%}
        {%- do sqlserver_cdc.spark_type(column.type) -%}
    {%- endfor -%}
    {%- for key in raw.key if key | lower not in names -%}
        {{ exceptions.raise_compiler_error("tracked table '" ~ table_name ~ "': key column '" ~ key ~ "' is not among its columns") }}
    {%- endfor -%}
    {%- set history_columns = raw.get('history_columns') -%}
    {%- if history_columns is not none -%}
        {%- if history_columns is string or history_columns | length == 0 -%}
            {{ exceptions.raise_compiler_error("tracked table '" ~ table_name ~ "': history_columns must be a non-empty list of column names; got " ~ history_columns) }}
        {%- endif -%}
        {%- for column in history_columns if column | lower not in names -%}
            {{ exceptions.raise_compiler_error("tracked table '" ~ table_name ~ "': history_columns names '" ~ column ~ "', which is not among its columns (" ~ (names | join(', ')) ~ ")") }}
        {%- endfor -%}
    {%- endif -%}
    {{ return({
        'name': table_name,
        'channel': raw.channel,
        'capture_instance': raw.get('capture_instance'),
        'source_database': raw.get('source_database'),
        'source_schema': raw.get('source_schema'),
        'source_table': raw.get('source_table'),
        'key': raw.key,
        'columns': raw.columns,
        'buckets': raw.get('buckets', 8),
        'soft_deletes': raw.get('soft_deletes', false),
        'history_delete_versions': raw.get('history_delete_versions', false),
        'history_columns': history_columns,
    }) }}
{%- endmacro %}
