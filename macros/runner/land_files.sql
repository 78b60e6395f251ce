{#- Used by the runner (dbt run-operation) to land a batch of files into the raw table, in SQL
    only, so the same code lands files on the embedded session and on a cluster (Thrift, http):
    the files are read where the SQL runs, so their paths must be readable there.
    `files`: the runner's discovery, each {kind, entity, path (absolute), relative (to the
    landing folder, recorded as _source_file), format (csv, parquet or json), size (bytes),
    modified_ms (modification time, epoch milliseconds)}. A file is identified by its relative
    path, size and modification time, read from the files' records (_landed_files_query): one
    already landed is skipped; one whose path was landed with another size or time is refused
    alone (exports are immutable; the remedy is in its reason).
    Each file is read through its own temporary view (so every record carries its file as a
    literal, without input_file_name(), and each CSV file is read with its own header):
    csv as text with the header and dialect the runner read (RFC 4180 unless its folder declares
    another: runner/sources/landing.py csv_options), parquet with the file's schema, JSON lines as text
    lines (blank lines skipped). Every record becomes a map of lower-cased column names to text
    (binary as 0x + uppercase hex); a JSON line is parsed to map<string,string> (nested values
    keep their JSON text; a line that is not a JSON object lands with a NULL map) and keeps its
    text in raw_text. The whole batch lands in one INSERT, one Delta commit (one per 200 files
    on huge batches, to keep Spark's plan small) with the records of its files, so a file is landed
    whole or not at all; the temporary views are dropped afterwards. -#}
{% macro land_files(files, batch_id, raw_schema=none) -%}
    {{ return(adapter.dispatch('land_files', 'sqlserver_cdc')(files, batch_id, raw_schema)) }}
{%- endmacro %}

{% macro spark__land_files(files, batch_id, raw_schema=none) -%}
    {%- set schema = raw_schema or var('cdc_raw_schema', target.schema ~ '_raw') -%}
    {%- set raw = schema ~ '.landed_rows' -%}
    {%- if not batch_id -%}
        {{ exceptions.raise_compiler_error("land_files: batch_id is empty; the runner passes its batch id") }}
    {%- endif -%}
    {#- the raw table exists: open_run created it -#}
    {%- set rows = run_query(sqlserver_cdc._landed_files_query(raw, recorded=true)).rows -%}
    {%- set recorded = rows | length > 0 -%}
    {%- if not recorded -%}
        {%- set rows = run_query(sqlserver_cdc._landed_files_query(raw, recorded=false)).rows -%}
    {%- endif -%}
    {%- set seen = {} -%}
    {%- for row in rows if row[0] is not none -%}
        {%- do seen.update({row[0]: [row[1], row[2]]}) -%}
    {%- endfor -%}
    {%- set new = [] -%}
    {%- set refused = {} -%}
    {%- set waiting = [] -%}
    {%- for file in files -%}
        {%- do sqlserver_cdc._check_landing_file(file) -%}
        {%- if file.relative in seen -%}
            {%- if seen[file.relative] != [file.size, file.modified_ms] -%}
                {%- do refused.update({file.relative: 'changed since it was landed (landed: ' ~ seen[file.relative][0]
                    ~ ' bytes modified at ' ~ seen[file.relative][1] ~ ' ms; now: ' ~ file.size ~ ' bytes modified at '
                    ~ file.modified_ms ~ ' ms): it was landed while still being written, or replaced. Exports are immutable: '
                    ~ 'put the whole file under a new name (with a new manifest if one lists it); it lands whole and the rows '
                    ~ 'landed from the first copy are taken once. Then remove this one'}) -%}
            {%- endif -%}
        {%- elif file.get('refused') -%}
            {%- do refused.update({file.relative: file.refused}) -%}
        {%- elif file.get('waiting') -%}
            {%- do waiting.append({'file': file.relative, 'reason': file.waiting, 'wait': file.get('wait', '')}) -%}
        {%- else -%}
            {%- do new.append(file) -%}
        {%- endif -%}
    {%- endfor -%}
    {%- set views = {} -%}
    {%- set described = {} -%}
    {%- set ignored = [] -%}
    {%- for file in new if file.format != 'manifest' -%}
        {%- set view = 'sqlserver_cdc_landing_' ~ loop.index -%}
        {%- do views.update({file.relative: view}) -%}
        {#- the runner names this file when Spark fails to read it (its reason may not) -#}
        {{ log('sqlserver_cdc.reading ' ~ tojson({'file': file.relative}), info=true) }}
        {%- do run_query(sqlserver_cdc._landing_view_ddl(view, file)) -%}
        {%- if file.format != 'json' -%}
            {%- set columns = [] -%}
            {%- for column in run_query('describe ' ~ view) -%}
                {%- if not column[0] or column[0].startswith('#') -%}{%- break -%}{%- endif -%}
                {%- do columns.append([column[0], column[1]]) -%}
            {%- endfor -%}
            {%- do described.update({file.relative: columns}) -%}
            {%- do sqlserver_cdc._check_exported_columns(file, columns, refused, ignored) -%}
        {%- endif -%}
    {%- endfor -%}
    {%- do sqlserver_cdc._check_manifests(new, views, seen, raw, refused) -%}
    {%- set selects = [] -%}
    {%- for file in new if file.relative not in refused -%}
        {%- if file.format == 'manifest' -%}
            {%- do selects.append(sqlserver_cdc._manifest_row_select(file, batch_id)) -%}
        {%- else -%}
            {{ log('sqlserver_cdc.reading ' ~ tojson({'file': file.relative}), info=true) }}
            {%- do selects.append(sqlserver_cdc._landed_rows_select(views[file.relative], file, batch_id, described.get(file.relative))) -%}
        {%- endif -%}
    {%- endfor -%}
    {#- each chunk carries the records of its own files, so a file and its record land in one commit -#}
    {%- set landing = [] -%}
    {%- for file in new if file.relative not in refused -%}{%- do landing.append(file) -%}{%- endfor -%}
    {%- set chunks = (selects | batch(200) | list) or ([] if recorded else [[]]) -%}
    {%- for chunk in chunks -%}
        {%- set records = [sqlserver_cdc._landed_file_records(landing[loop.index0 * 200:(loop.index0 + 1) * 200], batch_id,
            first=not recorded and loop.first)] -%}
        {%- if not recorded and loop.first -%}
            {%- do records.append(sqlserver_cdc._landed_file_backfill(raw, batch_id)) -%}
        {%- endif -%}
        {%- do run_query('insert into ' ~ raw ~ '\n' ~ (chunk + records) | join('\nunion all\n')) -%}
    {%- endfor -%}
    {%- for view in views.values() -%}
        {%- do run_query('drop view if exists ' ~ view) -%}
    {%- endfor -%}
    {{ log('sqlserver_cdc.reading ' ~ tojson({'file': none}), info=true) }}
    {%- set refusals = [] -%}
    {%- for relative, reason in refused.items() | sort -%}{%- do refusals.append(relative ~ ': ' ~ reason) -%}{%- endfor -%}
    {%- set outcome = {'landed': selects | length, 'refused': refusals, 'waiting': waiting | sort(attribute='file'), 'ignored': ignored | sort} -%}
    {{ log('sqlserver_cdc.land_files ' ~ tojson(outcome), info=true) }}
    {{ return(outcome) }}
{%- endmacro %}

{% macro default__land_files(files, batch_id, raw_schema=none) -%}
    {{ exceptions.raise_compiler_error(sqlserver_cdc._not_supported('land_files')) }}
{%- endmacro %}

{#- The checks of export manifests about to land (docs/landing.md "Export manifests"), which refuse a
    manifest and every file it lists (adding them to `refused`) unless its LSNs parse, after_lsn
    is not above through_lsn, no file it lists is refused, and each has the rows it says: counted from the
    file's view before it lands, or from the raw table for a file landed earlier (reading the
    listed files only; queries of at most 100 files or 100 manifests). -#}
{% macro _check_manifests(new, views, seen, raw, refused) -%}
    {%- set manifests = [] -%}
    {%- for file in new if file.format == 'manifest' -%}{%- do manifests.append(file) -%}{%- endfor -%}
    {%- if not manifests -%}{{ return(none) }}{%- endif -%}
    {#- every LSN of every manifest, in order ('-' for an absent optional one: agate reads '' as NULL) -#}
    {%- set lsns = [] -%}
    {%- for m in manifests -%}
        {%- for field, value in m.lsns.items() | sort -%}
            {%- do lsns.append(sqlserver_cdc.lsn_normalize(sqlserver_cdc._sql_string(value), 'string') if value is not none else "'-'") -%}
        {%- endfor -%}
    {%- endfor -%}
    {#- in chunks, to keep each query's plan small when many exports land at once -#}
    {%- set parsed = [] -%}
    {%- for chunk in lsns | batch(200) -%}
        {%- do parsed.extend(run_query('select ' ~ chunk | join(', ')).rows[0]) -%}
    {%- endfor -%}
    {%- set counts = [] -%}
    {%- set earlier = [] -%}
    {%- set position = namespace(i=0) -%}
    {%- for m in manifests -%}
        {%- set normalized = {} -%}
        {%- for field, value in m.lsns.items() | sort -%}
            {%- set lsn = parsed[position.i] -%}
            {%- set position.i = position.i + 1 -%}
            {%- if lsn is none and m.relative not in refused -%}
                {%- do refused.update({m.relative: 'export manifest: ' ~ field ~ ' ' ~ value ~ ' is not an LSN'}) -%}
            {%- endif -%}
            {%- do normalized.update({field: none if lsn == '-' else lsn}) -%}
        {%- endfor -%}
        {%- if normalized.get('after_lsn') and normalized.get('through_lsn') and normalized.after_lsn > normalized.through_lsn and m.relative not in refused -%}
            {%- do refused.update({m.relative: 'export manifest: after_lsn ' ~ m.lsns.after_lsn ~ ' is above through_lsn ' ~ m.lsns.through_lsn}) -%}
        {%- endif -%}
        {%- do m.update({'lsns': normalized}) -%}
        {%- for relative in m.files -%}
            {%- if relative in views -%}
                {%- do counts.append('select ' ~ sqlserver_cdc._sql_string(relative) ~ ' as file, count(*) as n from ' ~ views[relative]
                    ~ (" where trim(value) != ''" if relative.lower().endswith(('.json', '.jsonl')) else '')) -%}
            {%- elif relative in seen -%}
                {%- do earlier.append(sqlserver_cdc._sql_string(relative)) -%}
            {%- endif -%}
        {%- endfor -%}
    {%- endfor -%}
    {%- if earlier -%}
        {%- do counts.append("select _source_file as file, count(*) as n from " ~ raw ~ " where landing_kind in ('change_tables', 'snapshots')"
            ~ " and _source_file in (" ~ earlier | join(', ') ~ ") group by _source_file") -%}
    {%- endif -%}
    {%- set found = {} -%}
    {%- for chunk in counts | batch(100) -%}
        {%- for row in run_query(chunk | join('\nunion all\n')) -%}{%- do found.update({row[0]: row[1] | int}) -%}{%- endfor -%}
    {%- endfor -%}
    {%- for m in manifests -%}
        {%- for relative in m.files -%}
            {%- set expected = m.rows_by_file[relative] -%}
            {%- if relative in refused -%}
                {%- if m.relative not in refused -%}
                    {%- do refused.update({m.relative: 'export manifest: its file ' ~ relative ~ ' is refused'}) -%}
                {%- endif -%}
            {%- elif found.get(relative, 0) != expected -%}
                {%- do refused.update({relative: found.get(relative, 0) ~ ' rows, but its export manifest ' ~ m.relative
                    ~ ' says ' ~ expected ~ ': it was cut short or is not the exported file'}) -%}
                {%- if m.relative not in refused -%}
                    {%- do refused.update({m.relative: 'export manifest: its file ' ~ relative ~ ' is refused'}) -%}
                {%- endif -%}
            {%- endif -%}
        {%- endfor -%}
        {%- if m.relative in refused -%}
            {%- for relative in m.files if relative in views and relative not in refused -%}
                {%- do refused.update({relative: 'its export manifest ' ~ m.relative ~ ' is refused: ' ~ refused[m.relative]}) -%}
            {%- endfor -%}
        {%- endif -%}
    {%- endfor -%}
{%- endmacro %}

{#- Each landed file's record (landing kind `landed_files`, entity `all`, one small partition):
    `_source_file`, `_source_size` and `_source_modified_ms` as its rows carry them, `_batch_id`
    the batch it landed in; row_values its landing kind and entity. A file's record lands in the
    same commit as its rows, so the landed-files check reads only records, not every landed row.
    The first records of a raw table come with a marker (`_source_file` NULL) and the records of
    the files landed before records were kept (an earlier release), read once from their rows. -#}
{% macro _landed_files_query(raw, recorded) -%}
    select _source_file, max(_source_size), max(_source_modified_ms)
    from {{ raw }}
    {%- if recorded %}
    where landing_kind = 'landed_files'
    {%- else %}
    where {{ sqlserver_cdc._landed_from_files() }}
    {%- endif %}
    group by _source_file
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
            '_source_modified_ms': 'record._source_modified_ms', 'landing_kind': "'landed_files'", 'entity': "'all'"}, batch_id) }}
    from (select explode(array({{ records | join(',\n        ') }})) as record) as records
{%- endmacro %}

{#- The records of the files a raw table landed before it kept records (see _landed_files_query). -#}
{% macro _landed_file_backfill(raw, batch_id) -%}
    select
        {{ sqlserver_cdc._raw_select_list({
            'row_values': "cast(map('landing_kind', max(landing_kind), 'entity', max(entity)) as map<string, string>)",
            'raw_text': 'cast(null as string)', '_source_file': '_source_file', '_source_size': 'max(_source_size)',
            '_source_modified_ms': 'max(_source_modified_ms)', 'landing_kind': "'landed_files'", 'entity': "'all'"}, batch_id) }}
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
        ['_ingested_at', 'timestamp'], ['landing_kind', 'string'], ['entity', 'string']]) }}
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
    appended once per landing batch. -#}
{% macro _raw_table_ddl(raw) -%}
    {%- set columns = [] -%}
    {%- for c in sqlserver_cdc._raw_columns() -%}{%- do columns.append(c[0] ~ ' ' ~ c[1]) -%}{%- endfor -%}
    create table if not exists {{ raw }} ({{ columns | join(', ') }}) using delta partitioned by (landing_kind, entity)
{%- endmacro %}

{% macro _check_landing_file(file) -%}
    {%- for field in ['kind', 'entity', 'path', 'relative', 'format', 'size', 'modified_ms'] -%}
        {%- if file is not mapping or file.get(field) is none or file.get(field) == '' -%}
            {{ exceptions.raise_compiler_error("land_files: every entry of files needs kind, entity, path, relative, format, size and modified_ms; got " ~ file) }}
        {%- endif -%}
    {%- endfor -%}
    {%- if file.format not in ('csv', 'parquet', 'json', 'manifest') -%}
        {{ exceptions.raise_compiler_error("land_files: format of " ~ file.relative ~ " must be csv, parquet, json or manifest; got " ~ file.format) }}
    {%- endif -%}
    {%- if file.format == 'csv' and not (file.get('refused') or file.get('waiting')) and (file.get('csv') is not mapping or not file.csv.get('header')) -%}
        {{ exceptions.raise_compiler_error("land_files: CSV file " ~ file.relative ~ " needs csv (header and options: the runner reads them)") }}
    {%- endif -%}
    {%- if file.format == 'manifest' and not (file.get('refused') or file.get('waiting')) and (file.get('lsns') is none or file.get('files') is none or file.get('rows_by_file') is none) -%}
        {{ exceptions.raise_compiler_error("land_files: manifest " ~ file.relative ~ " needs lsns, files and rows_by_file (the runner reads them)") }}
    {%- endif -%}
{%- endmacro %}

{#- An export of a declared capture instance (file.expected_columns, from the runner: its
    declared captured columns) must carry each of them: a file that lacks one is refused, naming
    the columns and the remedy (a renamed or dropped column would otherwise land as NULL in
    every change). Columns neither declared nor SQL Server's __$ metadata are noted in `ignored`
    (once: a landed file is never read again). -#}
{% macro _check_exported_columns(file, columns, refused, ignored) -%}
    {%- if file.get('expected_columns') is none -%}{{ return(none) }}{%- endif -%}
    {%- set names = columns | map(attribute=0) | map('lower') | list -%}
    {%- set missing = file.expected_columns | reject('in', names) | list -%}
    {%- set extra = names | reject('in', file.expected_columns) | reject('in', ['__$start_lsn', '__$end_lsn', '__$seqval',
        '__$operation', '__$update_mask', '__$command_id']) | list -%}
    {%- if missing -%}
        {%- do refused.update({file.relative: 'its columns lack ' ~ missing | join(', ') ~ ', declared for capture instance '
            ~ file.entity ~ ' (it has ' ~ names | join(', ') ~ '): a column renamed or dropped in the export would land as NULL. '
            ~ 'Re-export with the declared columns; if the table changed, SQL Server keeps the old capture instance as it was: '
            ~ 'declare the new one (docs/tables.md "Capture-instance changes")'}) -%}
    {%- elif extra -%}
        {%- do ignored.append(file.relative ~ ': column(s) ' ~ extra | join(', ') ~ ' not declared for capture instance '
            ~ file.entity ~ ', not applied') -%}
    {%- endif -%}
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
    time, its landing kind and entity. -#}
{% macro _file_columns(file) -%}
    {{ return({'_source_file': sqlserver_cdc._sql_string(file.relative), '_source_size': 'cast(' ~ file.size | int ~ ' as bigint)',
        '_source_modified_ms': 'cast(' ~ file.modified_ms | int ~ ' as bigint)',
        'landing_kind': sqlserver_cdc._sql_string(file.kind), 'entity': sqlserver_cdc._sql_string(file.entity)}) }}
{%- endmacro %}

{#- The raw table's columns for the records of one file's view. -#}
{% macro _landed_rows_select(view, file, batch_id, columns=none) -%}
    {%- if file.format == 'json' -%}
        {%- set row_values = "from_json(value, 'map<string,string>')" -%}
        {%- set raw_text = 'value' -%}
    {%- else -%}
        {%- set pairs = [] -%}
        {%- for column in columns -%}
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

{#- Used by the runner after land_files: the records a batch landed per landing kind and entity. -#}
{% macro landed_batch_counts(batch_id, raw_schema=none) -%}
    {{ return(adapter.dispatch('landed_batch_counts', 'sqlserver_cdc')(batch_id=batch_id, raw_schema=raw_schema)) }}
{%- endmacro %}

{% macro spark__landed_batch_counts(batch_id, raw_schema=none) -%}
    select landing_kind, entity, count(*) as records
    from {{ raw_schema or var('cdc_raw_schema', target.schema ~ '_raw') }}.landed_rows
    where _batch_id = {{ sqlserver_cdc._sql_string(batch_id) }} and landing_kind not in ('kafka_offsets', 'landed_files')
    group by landing_kind, entity
{%- endmacro %}

{% macro default__landed_batch_counts(batch_id, raw_schema=none) -%}
    {{ exceptions.raise_compiler_error(sqlserver_cdc._not_supported('landed_batch_counts')) }}
{%- endmacro %}
