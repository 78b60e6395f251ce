{#- Used by the runner (dbt run-operation) to land a batch of files into the raw table, in SQL
    only, so the same code lands files on the embedded session and on a cluster (Thrift, http):
    the files are read where the SQL runs, so their paths must be readable there.
    `files`: the files to land, as the runner decided them (runner/sources/landing.py intake:
    new, whole and checked), each {kind, entity, path (absolute), relative (to the landing
    folder, recorded as _source_file), format (csv, parquet, json or manifest), size (bytes),
    modified_ms (modification time, epoch milliseconds), columns ([name, type], csv and parquet)}
    and a manifest's fields. Each file is read through its own temporary view (_landing_view_ddl),
    so every record carries its file as a literal and each CSV file is read with its own header.
    Every record becomes a map of lower-cased column names to text (binary as 0x + uppercase hex);
    a JSON line is parsed to map<string,string> (nested values keep their JSON text; a line that
    is not a JSON object lands with a NULL map) and keeps its text in raw_text. The whole batch
    lands in one INSERT, one Delta commit (one per 200 files on huge batches, to keep Spark's plan
    small) with the records of its files, so a file is landed whole or not at all.
    first_records: the raw table has no landed-file records yet (open_run's records_kept), so
    this batch writes the first with the records of the files landed before (_landed_file_backfill). -#}
{% macro land_files(files, batch_id, raw_schema=none, first_records=false) -%}
    {{ return(adapter.dispatch('land_files', 'sqlserver_cdc')(files, batch_id, raw_schema, first_records)) }}
{%- endmacro %}

{% macro spark__land_files(files, batch_id, raw_schema=none, first_records=false) -%}
    {%- set raw = (raw_schema or var('cdc_raw_schema', target.schema ~ '_raw')) ~ '.landed_rows' -%}
    {%- if not batch_id -%}
        {{ exceptions.raise_compiler_error("land_files: batch_id is empty; the runner passes its batch id") }}
    {%- endif -%}
    {%- set views, selects = [], [] -%}
    {%- for file in files -%}
        {%- if file.format == 'manifest' -%}
            {%- do selects.append(sqlserver_cdc._manifest_row_select(file, batch_id)) -%}
        {%- else -%}
            {%- do views.append('sqlserver_cdc_landing_' ~ loop.index) -%}
            {#- the runner names this file when Spark fails to read it (its reason may not) -#}
            {{ log('sqlserver_cdc.reading ' ~ tojson({'file': file.relative}), info=true) }}
            {%- do run_query(sqlserver_cdc._landing_view_ddl(views[-1], file)) -%}
            {%- do selects.append(sqlserver_cdc._landed_rows_select(views[-1], file, batch_id)) -%}
        {%- endif -%}
    {%- endfor -%}
    {#- each chunk carries the records of its own files, so a file and its record land in one commit -#}
    {%- for chunk in (selects | batch(200) | list) or ([[]] if first_records else []) -%}
        {%- set records = [sqlserver_cdc._landed_file_records(files[loop.index0 * 200:(loop.index0 + 1) * 200], batch_id,
            first=first_records and loop.first)] -%}
        {%- if first_records and loop.first -%}
            {%- do records.append(sqlserver_cdc._landed_file_backfill(raw, batch_id)) -%}
        {%- endif -%}
        {%- do run_query('insert into ' ~ raw ~ '\n' ~ (chunk + records) | join('\nunion all\n')) -%}
    {%- endfor -%}
    {%- for view in views -%}{%- do run_query('drop view if exists ' ~ view) -%}{%- endfor -%}
    {{ log('sqlserver_cdc.reading ' ~ tojson({'file': none}), info=true) }}
    {{ log('sqlserver_cdc.land_files ' ~ tojson({'landed': selects | length}), info=true) }}
{%- endmacro %}

{% macro default__land_files(files, batch_id, raw_schema=none, first_records=false) -%}
    {{ exceptions.raise_compiler_error(sqlserver_cdc._not_supported('land_files')) }}
{%- endmacro %}

{#- Used by the runner (dbt run-operation) before it lands files (runner/sources/landing.py
    intake), to read what its checks need; reports `sqlserver_cdc.probe_files {rows, lsns}`:
    rows, the records of each CSV or JSON file of `files` (read through its view; a JSON file's
    non-blank lines) and of each of `count_landed` (files landed earlier, from the raw table);
    lsns, each text of `lsns` in canonical form (null when it is not an LSN). Queries of at most
    100 files or 200 LSNs. -#}
{% macro probe_files(files, count_landed=[], lsns=[], raw_schema=none) -%}
    {{ return(adapter.dispatch('probe_files', 'sqlserver_cdc')(files, count_landed, lsns, raw_schema)) }}
{%- endmacro %}

{% macro default__probe_files(files, count_landed=[], lsns=[], raw_schema=none) -%}
    {{ exceptions.raise_compiler_error(sqlserver_cdc._not_supported('probe_files')) }}
{%- endmacro %}

{% macro spark__probe_files(files, count_landed=[], lsns=[], raw_schema=none) -%}
    {%- set raw = (raw_schema or var('cdc_raw_schema', target.schema ~ '_raw')) ~ '.landed_rows' -%}
    {%- set rows, counts, parsed = {}, [], [] -%}
    {%- for file in files -%}
        {%- set view = 'sqlserver_cdc_probe_' ~ loop.index -%}
        {{ log('sqlserver_cdc.reading ' ~ tojson({'file': file.relative}), info=true) }}
        {%- do run_query(sqlserver_cdc._landing_view_ddl(view, file)) -%}
        {%- do counts.append('select ' ~ sqlserver_cdc._sql_string(file.relative) ~ ' as file, count(*) as n from ' ~ view
            ~ (" where trim(value) != ''" if file.format == 'json' else '')) -%}
    {%- endfor -%}
    {%- for chunk in count_landed | batch(100) -%}
        {%- set literals = [] -%}
        {%- for relative in chunk -%}{%- do literals.append(sqlserver_cdc._sql_string(relative)) -%}{%- endfor -%}
        {%- do counts.append("select _source_file as file, count(*) as n from " ~ raw ~ " where landing_kind in ('change_tables', "
            ~ "'snapshots') and _source_file in (" ~ literals | join(', ') ~ ") group by _source_file") -%}
    {%- endfor -%}
    {%- for chunk in counts | batch(100) -%}
        {%- for row in run_query(chunk | join('\nunion all\n')) -%}{%- do rows.update({row[0]: row[1] | int}) -%}{%- endfor -%}
    {%- endfor -%}
    {#- as one JSON text, so agate does not read an all-digit LSN as a number -#}
    {%- for chunk in lsns | batch(200) -%}
        {%- set normalized = [] -%}
        {%- for lsn in chunk -%}{%- do normalized.append(sqlserver_cdc.lsn_normalize(sqlserver_cdc._sql_string(lsn), 'string')) -%}{%- endfor -%}
        {%- do parsed.extend(fromjson(run_query('select to_json(array(' ~ normalized | join(', ') ~ '))').rows[0][0])) -%}
    {%- endfor -%}
    {%- for file in files -%}{%- do run_query('drop view if exists sqlserver_cdc_probe_' ~ loop.index) -%}{%- endfor -%}
    {{ log('sqlserver_cdc.reading ' ~ tojson({'file': none}), info=true) }}
    {%- set canonical = {} -%}
    {%- for lsn in lsns -%}{%- do canonical.update({lsn: parsed[loop.index0]}) -%}{%- endfor -%}
    {{ log('sqlserver_cdc.probe_files ' ~ tojson({'rows': rows, 'lsns': canonical}), info=true) }}
{%- endmacro %}

{#- The landed files among `relatives` (paths relative to the landing folder), as {relative:
    [size, modified_ms]}, and whether the raw table keeps their records (see open_run). Each
    landed file has a record (landing kind `landed_files`, entity `all`, one small partition):
    `_source_file`, `_source_size` and `_source_modified_ms` as its rows carry them, `_batch_id`
    the batch it landed in; row_values its landing kind and entity. A file's record lands in the
    same commit as its rows, so this reads only records, not every landed row. The first records
    of a raw table come with a marker (`_source_file` NULL) and the records of the files landed
    before records were kept (an earlier release), read once from their rows. -#}
{% macro _landed_files(raw, relatives) -%}
    {%- set wanted, landed = {}, {} -%}
    {%- for relative in relatives -%}{%- do wanted.update({relative: true}) -%}{%- endfor -%}
    {%- set rows = run_query("select _source_file, max(_source_size), max(_source_modified_ms) from " ~ raw
        ~ " where landing_kind = 'landed_files' group by _source_file").rows -%}
    {%- set kept = rows | length > 0 -%}
    {%- if not kept -%}
        {%- set rows = run_query("select _source_file, max(_source_size), max(_source_modified_ms) from " ~ raw
            ~ " where " ~ sqlserver_cdc._landed_from_files() ~ " group by _source_file").rows -%}
    {%- endif -%}
    {%- for row in rows if row[0] in wanted -%}{%- do landed.update({row[0]: [row[1] | int, row[2] | int]}) -%}{%- endfor -%}
    {{ return({'landed': landed, 'records_kept': kept}) }}
{%- endmacro %}

{#- The rows landed from files (not from Kafka: runner/sources/kafka.py, nor records). -#}
{% macro _landed_from_files() -%}
    landing_kind not in ('landed_files', 'kafka_offsets') and _source_file is not null and not startswith(_source_file, 'kafka:')
{%- endmacro %}

{% macro _landed_file_records(files, batch_id, first=false) -%}
    {%- set records = [] -%}
    {%- for file in files -%}
        {%- do records.append('named_struct(' ~ "'row_values', map('landing_kind', " ~ sqlserver_cdc._sql_string(file.kind)
            ~ ", 'entity', " ~ sqlserver_cdc._sql_string(file.entity) ~ "), '_source_file', " ~ sqlserver_cdc._sql_string(file.relative)
            ~ ", '_source_size', cast(" ~ file.size | int ~ " as bigint), '_source_modified_ms', cast(" ~ file.modified_ms | int ~ " as bigint))") -%}
    {%- endfor -%}
    {%- if first -%}
        {%- do records.append("named_struct('row_values', map('marker', 'records kept from here on'), '_source_file', cast(null as string),"
            ~ " '_source_size', cast(null as bigint), '_source_modified_ms', cast(null as bigint))") -%}
    {%- endif -%}
    select
        {{ sqlserver_cdc._raw_select_list({'row_values': 'cast(record.row_values as map<string, string>)',
            'raw_text': 'cast(null as string)', '_source_file': 'record._source_file', '_source_size': 'record._source_size',
            '_source_modified_ms': 'record._source_modified_ms', 'landing_kind': "'landed_files'", 'entity': "'all'",
            'source_database': 'cast(null as string)'}, batch_id) }}
    from (select explode(array({{ records | join(',\n        ') }})) as record) as records
{%- endmacro %}

{#- The records of the files a raw table landed before it kept records (see _landed_files_query). -#}
{% macro _landed_file_backfill(raw, batch_id) -%}
    select
        {{ sqlserver_cdc._raw_select_list({
            'row_values': "cast(map('landing_kind', max(landing_kind), 'entity', max(entity)) as map<string, string>)",
            'raw_text': 'cast(null as string)', '_source_file': '_source_file', '_source_size': 'max(_source_size)',
            '_source_modified_ms': 'max(_source_modified_ms)', 'landing_kind': "'landed_files'", 'entity': "'all'",
            'source_database': 'cast(null as string)'}, batch_id) }}
    from {{ raw }}
    where {{ sqlserver_cdc._landed_from_files() }}
    group by _source_file
{%- endmacro %}

{#- The raw row of a manifest (landing kind `manifest` with entity its capture instance, or
    `snapshot_manifest` with entity its table): row_values the owner (capture_instance or table),
    its LSNs (canonical: after_lsn and through_lsn, or snapshot_lsn), files (JSON array of the
    landed paths), rows (their total); raw_text the manifest as read. -#}
{% macro _manifest_row_select(file, batch_id) -%}
    {%- set row_values -%}
        map({{ sqlserver_cdc._sql_string(file.owner) }}, {{ sqlserver_cdc._sql_string(file.entity) }},
            {%- for field, value in file.lsns.items() | sort %}
            {{ sqlserver_cdc._sql_string(field) }}, {{ sqlserver_cdc._sql_string(value) if value else 'cast(null as string)' }},
            {%- endfor %}
            'files', {{ sqlserver_cdc._sql_string(tojson(file.files)) }},
            'rows', '{{ file.rows_by_file.values() | sum }}')
    {%- endset %}
    {%- set values = sqlserver_cdc._file_columns(file) -%}
    {%- do values.update({'row_values': row_values, 'raw_text': sqlserver_cdc._sql_string(file.text)}) %}
    select
        {{ sqlserver_cdc._raw_select_list(values, batch_id) }}
{%- endmacro %}
{#- The raw table's columns and types, in order, the one place they are written: its DDL and
    every select that lands rows (_raw_select_list) are made from them (runner/sources/kafka.py
    appends its records by these names). -#}
{% macro _raw_columns() -%}
    {{ return([['row_values', 'map<string, string>'], ['raw_text', 'string'], ['_source_file', 'string'],
        ['_source_size', 'bigint'], ['_source_modified_ms', 'bigint'], ['_batch_id', 'string'],
        ['_ingested_at', 'timestamp'], ['landing_kind', 'string'], ['entity', 'string'], ['source_database', 'string']]) }}
{%- endmacro %}

{#- The raw table's columns as a select list, in order: `values` maps each column but _batch_id
    and _ingested_at (the batch's id and the time of the insert) to its SQL expression. -#}
{% macro _raw_select_list(values, batch_id) -%}
    {%- set given = {'_batch_id': sqlserver_cdc._sql_string(batch_id), '_ingested_at': 'current_timestamp()'} -%}
    {%- do given.update(values) -%}
    {%- set items = [] -%}
    {%- for c in sqlserver_cdc._raw_columns() -%}
        {%- if c[0] not in given -%}
            {{ exceptions.raise_compiler_error('_raw_select_list: no value for the raw column ' ~ c[0]) }}
        {%- endif -%}
        {%- do items.append(given[c[0]] ~ ' as ' ~ c[0]) -%}
    {%- endfor -%}
    {{ return(items | join(',\n        ')) }}
{%- endmacro %}

{#- The raw table: every landed record, partitioned by landing kind and entity; a Delta table
    appended once per landing batch. source_database: the declared database a file of
    `databases/<database>/` came from, NULL for the default database (the landing folder's top
    level), event lines and Kafka records (their events name their database). -#}
{% macro _raw_table_ddl(raw) -%}
    {%- set columns = [] -%}
    {%- for c in sqlserver_cdc._raw_columns() -%}{%- do columns.append(c[0] ~ ' ' ~ c[1]) -%}{%- endfor -%}
    create table if not exists {{ raw }} ({{ columns | join(', ') }}) using delta partitioned by (landing_kind, entity)
{%- endmacro %}

{#- A Spark SQL string literal (backslash escapes are on by default in Spark SQL; line breaks are
    written as escapes, so a literal stays on one line). -#}
{% macro _sql_string(value) -%}
    '{{ value | string | replace('\\', '\\\\') | replace("'", "\\'") | replace('\n', '\\n') | replace('\r', '\\r') }}'
{%- endmacro %}

{#- A temporary view over one file. Spark expands glob characters in a path, so they are escaped.
    A CSV file is read as the runner parsed its header (file.csv.header, every column text; the
    first line is skipped) with file.csv.options (its dialect, encoding and record separator:
    runner/sources/landing.py csv_options); multiLine, so a quoted value may hold line breaks. -#}
{% macro _landing_view_ddl(view, file) -%}
    {%- set path = modules.re.sub('([\\\\{}\\[\\]*?])', '\\\\\\1', file.path) -%}
    {%- set source = {'csv': "csv", 'parquet': "parquet", 'json': "text"}[file.format] -%}
    create or replace temporary view {{ view }}
    {%- if file.format == 'csv' %} (
        {%- for name in file.csv.header %}{{ ', ' if not loop.first }}`{{ name | replace('`', '``') }}` string{% endfor -%}
    ){%- endif %} using {{ source }}
    options (path {{ sqlserver_cdc._sql_string(path) }}
    {%- if file.format == 'csv' %}, header 'true', enforceSchema 'true', multiLine 'true'
        {%- for option, value in file.csv.options.items() | sort -%}
        , {{ option }} {{ sqlserver_cdc._sql_string(value) }}
        {%- endfor -%}
    {%- endif %})
{%- endmacro %}

{#- The raw columns every row landed from `file` carries: the file, its size and modification
    time, its landing kind, entity and database. -#}
{% macro _file_columns(file) -%}
    {{ return({'_source_file': sqlserver_cdc._sql_string(file.relative), '_source_size': 'cast(' ~ file.size | int ~ ' as bigint)',
        '_source_modified_ms': 'cast(' ~ file.modified_ms | int ~ ' as bigint)',
        'landing_kind': sqlserver_cdc._sql_string(file.kind), 'entity': sqlserver_cdc._sql_string(file.entity),
        'source_database': sqlserver_cdc._sql_string(file.database) if file.get('database') else 'cast(null as string)'}) }}
{%- endmacro %}

{#- The raw table's columns for the records of one file's view. -#}
{% macro _landed_rows_select(view, file, batch_id) -%}
    {%- if file.format == 'json' -%}
        {%- set row_values = "from_json(value, 'map<string,string>')" -%}
        {%- set raw_text = 'value' -%}
    {%- else -%}
        {%- set pairs = [] -%}
        {%- for column in file.columns -%}
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
    {%- set values = sqlserver_cdc._file_columns(file) -%}
    {%- do values.update({'row_values': row_values, 'raw_text': raw_text}) %}
    select
        {{ sqlserver_cdc._raw_select_list(values, batch_id) }}
    from {{ view }}
    {%- if file.format == 'json' %}
    where trim(value) != ''
    {%- endif -%}
{%- endmacro %}

{#- Used by the runner after land_files: the records a batch landed per landing kind, entity and database. -#}
{% macro landed_batch_counts(batch_id, raw_schema=none) -%}
    {{ return(adapter.dispatch('landed_batch_counts', 'sqlserver_cdc')(batch_id=batch_id, raw_schema=raw_schema)) }}
{%- endmacro %}

{% macro spark__landed_batch_counts(batch_id, raw_schema=none) -%}
    select landing_kind, entity, count(*) as records, source_database
    from {{ raw_schema or var('cdc_raw_schema', target.schema ~ '_raw') }}.landed_rows
    where _batch_id = {{ sqlserver_cdc._sql_string(batch_id) }} and landing_kind not in ('kafka_offsets', 'landed_files')
    group by landing_kind, entity, source_database
{%- endmacro %}

{% macro default__landed_batch_counts(batch_id, raw_schema=none) -%}
    {{ exceptions.raise_compiler_error(sqlserver_cdc._not_supported('landed_batch_counts')) }}
{%- endmacro %}
