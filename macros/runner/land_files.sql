{#- Used by the runner (dbt run-operation) to land a batch of files into the raw table, in SQL
    only, so the same code lands files on the embedded session and on a cluster (Thrift, http):
    the files are read where the SQL runs, so their paths must be readable there.
    `files`: the runner's discovery, each {kind, entity, path (absolute), relative (to the
    landing folder, recorded as _source_file), format (csv, parquet or json), size (bytes),
    modified_ms (modification time, epoch milliseconds)}. A file is identified by its relative
    path, size and modification time: one already landed is skipped; one whose path was landed
    with another size or time fails the batch before anything lands (exports are immutable).
    Each file is read through its own temporary view (so every record carries its file as a
    literal, without input_file_name(), and each CSV file is read with its own header):
    csv with a header and no type inference, parquet with the file's schema, JSON lines as text
    lines (blank lines skipped). Every record becomes a map of lower-cased column names to text
    (binary as 0x + uppercase hex); a JSON line is parsed to map<string,string> (nested values
    keep their JSON text; a line that is not a JSON object lands with a NULL map) and keeps its
    text in raw_text. The whole batch lands in one INSERT, one Delta commit (one per 200 files
    on huge batches, to keep Spark's plan small), so a file is landed whole or not at all; the
    temporary views are dropped afterwards. -#}
{% macro land_files(files, batch_id, raw_schema=none) -%}
    {{ return(adapter.dispatch('land_files', 'sqlserver_cdc')(files, batch_id, raw_schema)) }}
{%- endmacro %}

{% macro default__land_files(files, batch_id, raw_schema=none) -%}
    {%- set schema = raw_schema or var('cdc_raw_schema', target.schema ~ '_raw') -%}
    {%- set raw = schema ~ '.landed_rows' -%}
    {%- if not batch_id -%}
        {{ exceptions.raise_compiler_error("land_files: batch_id is empty; the runner passes its batch id") }}
    {%- endif -%}
    {% do run_query('create schema if not exists ' ~ schema) %}
    {% do run_query(sqlserver_cdc._raw_table_ddl(raw)) %}
    {%- set seen = {} -%}
    {%- for row in run_query('select _source_file, max(_source_size), max(_source_modified_ms) from ' ~ raw
        ~ ' group by _source_file') -%}
        {%- do seen.update({row[0]: [row[1], row[2]]}) -%}
    {%- endfor -%}
    {%- set new = [] -%}
    {%- set changed = [] -%}
    {%- for file in files -%}
        {%- do sqlserver_cdc._check_landing_file(file) -%}
        {%- if file.relative not in seen -%}
            {%- do new.append(file) -%}
        {%- elif seen[file.relative] != [file.size, file.modified_ms] -%}
            {%- do changed.append(file.relative ~ ' (landed: ' ~ seen[file.relative][0] ~ ' bytes modified at '
                ~ seen[file.relative][1] ~ ' ms; now: ' ~ file.size ~ ' bytes modified at ' ~ file.modified_ms ~ ' ms)') -%}
        {%- endif -%}
    {%- endfor -%}
    {%- if changed -%}
        {{ exceptions.raise_compiler_error("land_files: " ~ changed | length ~ " landed file(s) changed since they were landed: "
            ~ changed[:5] | join('; ') ~ ". Exports are immutable: land the corrected export under a new name; nothing was landed") }}
    {%- endif -%}
    {%- set views = [] -%}
    {%- set selects = [] -%}
    {%- for file in new -%}
        {%- set view = 'sqlserver_cdc_landing_' ~ loop.index -%}
        {%- do views.append(view) -%}
        {%- do run_query(sqlserver_cdc._landing_view_ddl(view, file)) -%}
        {%- do selects.append(sqlserver_cdc._landed_rows_select(view, file, batch_id)) -%}
    {%- endfor -%}
    {%- for chunk in selects | batch(200) -%}
        {%- do run_query('insert into ' ~ raw ~ '\n' ~ chunk | join('\nunion all\n')) -%}
    {%- endfor -%}
    {%- for view in views -%}
        {%- do run_query('drop view if exists ' ~ view) -%}
    {%- endfor -%}
    {{ log('land_files: ' ~ new | length ~ ' new of ' ~ files | length ~ ' files landed in batch ' ~ batch_id) }}
{%- endmacro %}

{#- The raw table: every landed record, partitioned by landing kind and entity; a Delta table
    appended once per landing batch. -#}
{% macro _raw_table_ddl(raw) -%}
    create table if not exists {{ raw }} (
        row_values map<string, string>,
        raw_text string,
        _source_file string,
        _source_size bigint,
        _source_modified_ms bigint,
        _batch_id string,
        _ingested_at timestamp,
        landing_kind string,
        entity string
    ) using delta partitioned by (landing_kind, entity)
{%- endmacro %}

{% macro _check_landing_file(file) -%}
    {%- for field in ['kind', 'entity', 'path', 'relative', 'format', 'size', 'modified_ms'] -%}
        {%- if file is not mapping or file.get(field) is none or file.get(field) == '' -%}
            {{ exceptions.raise_compiler_error("land_files: every entry of files needs kind, entity, path, relative, format, size and modified_ms; got " ~ file) }}
        {%- endif -%}
    {%- endfor -%}
    {%- if file.format not in ('csv', 'parquet', 'json') -%}
        {{ exceptions.raise_compiler_error("land_files: format of " ~ file.relative ~ " must be csv, parquet or json; got " ~ file.format) }}
    {%- endif -%}
{%- endmacro %}

{#- A Spark SQL string literal (backslash escapes are on by default in Spark SQL). -#}
{% macro _sql_string(value) -%}
    '{{ value | string | replace('\\', '\\\\') | replace("'", "\\'") }}'
{%- endmacro %}

{#- A temporary view over one file. Spark expands glob characters in a path, so they are escaped. -#}
{% macro _landing_view_ddl(view, file) -%}
    {%- set path = modules.re.sub('([\\\\{}\\[\\]*?])', '\\\\\\1', file.path) -%}
    {%- set source = {'csv': "csv", 'parquet': "parquet", 'json': "text"}[file.format] -%}
    create or replace temporary view {{ view }} using {{ source }}
    options (path {{ sqlserver_cdc._sql_string(path) }}
    {%- if file.format == 'csv' %}, header 'true', inferSchema 'false'{% endif %})
{%- endmacro %}

{#- The raw table's columns for the records of one file's view. -#}
{% macro _landed_rows_select(view, file, batch_id) -%}
    {%- if file.format == 'json' -%}
        {%- set row_values = "from_json(value, 'map<string,string>')" -%}
        {%- set raw_text = 'value' -%}
    {%- else -%}
        {%- set pairs = [] -%}
        {%- for column in run_query('describe ' ~ view) -%}
            {%- if not column[0] or column[0].startswith('#') -%}{%- break -%}{%- endif -%}
            {%- set quoted = '`' ~ column[0] | replace('`', '``') ~ '`' -%}
            {%- if column[1] == 'binary' -%}
                {%- set text = "case when " ~ quoted ~ " is not null then concat('0x', hex(" ~ quoted ~ ")) end" -%}
            {%- else -%}
                {%- set text = 'cast(' ~ quoted ~ ' as string)' -%}
            {%- endif -%}
            {%- do pairs.append(sqlserver_cdc._sql_string(column[0] | lower) ~ ', ' ~ text) -%}
        {%- endfor -%}
        {%- set row_values = 'cast(map(' ~ pairs | join(', ') ~ ') as map<string, string>)' -%}
        {%- set raw_text = 'cast(null as string)' -%}
    {%- endif -%}
    select
        {{ row_values }} as row_values,
        {{ raw_text }} as raw_text,
        {{ sqlserver_cdc._sql_string(file.relative) }} as _source_file,
        cast({{ file.size | int }} as bigint) as _source_size,
        cast({{ file.modified_ms | int }} as bigint) as _source_modified_ms,
        {{ sqlserver_cdc._sql_string(batch_id) }} as _batch_id,
        current_timestamp() as _ingested_at,
        {{ sqlserver_cdc._sql_string(file.kind) }} as landing_kind,
        {{ sqlserver_cdc._sql_string(file.entity) }} as entity
    from {{ view }}
    {%- if file.format == 'json' %}
    where trim(value) != ''
    {%- endif -%}
{%- endmacro %}

{#- Used by the runner after land_files: the records a batch landed per landing kind and entity. -#}
{% macro landed_batch_counts(batch_id, raw_schema=none) -%}
    select landing_kind, entity, count(*) as records
    from {{ raw_schema or var('cdc_raw_schema', target.schema ~ '_raw') }}.landed_rows
    where _batch_id = {{ sqlserver_cdc._sql_string(batch_id) }}
    group by landing_kind, entity
{%- endmacro %}
