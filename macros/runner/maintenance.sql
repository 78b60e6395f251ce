{#- Maintenance of the tables the runner writes (docs/operations.md "Maintenance"): the statements
    and the maintenance ledger; runner/run/maintenance.py decides what each pass does. -#}

{#- The maintenance ledger: one row per table a pass did something to, in <target
    schema>.cdc_maintenance (var cdc_maintenance_table), a Delta table. -#}
{% macro maintenance_relation() -%}
    {{ return(api.Relation.create(database=none, schema=target.schema,
        identifier=var('cdc_maintenance_table', 'cdc_maintenance'), type='table')) }}
{%- endmacro %}

{#- The maintenance ledger's columns and types, the one place they are written (its DDL and its
    INSERT). -#}
{% macro _maintenance_columns() -%}
    {{ return([
        ['started_at', 'timestamp'], ['ended_at', 'timestamp'], ['seconds', 'double'], ['relation', 'string'],
        ['kind', 'string'], ['reason', 'string'], ['files_before', 'bigint'], ['bytes_before', 'bigint'],
        ['files_after', 'bigint'], ['bytes_after', 'bigint'], ['disk_bytes_after', 'bigint'],
        ['properties_set', 'array<string>'], ['compacted', 'boolean'], ['compaction_files_removed', 'bigint'],
        ['compaction_files_added', 'bigint'], ['deletion_vectors_purged', 'bigint'], ['vacuumed', 'boolean'],
        ['vacuum_files_deleted', 'bigint'], ['vacuum_bytes_deleted', 'bigint'], ['raw_rows_deleted', 'bigint'],
        ['raw_held_from', 'string'], ['modified_after', 'string'], ['removed_through', 'timestamp']]) }}
{%- endmacro %}

{#- Used by the runner (dbt run-operation): what a pass decides from (runner/run/maintenance.py),
    reported as `sqlserver_cdc.maintenance_facts {...}`: `tables`, per relation of `relations`
    ([{relation, kind}]; a model by its name) that exists, DESCRIBE DETAIL's numFiles, sizeInBytes,
    lastModified and retention properties, with the maintenance ledger's last row for it
    (`last`); `staged_through`, each staging model's last batch taken in (the watermarks);
    `manifests_from` and `first_run` from the run ledger; `last_maintained` from the maintenance
    ledger. -#}
{% macro maintenance_facts(relations) -%}
    {{ return(adapter.dispatch('maintenance_facts', 'sqlserver_cdc')(relations)) }}
{%- endmacro %}

{% macro default__maintenance_facts(relations) -%}
    {{ exceptions.raise_compiler_error(sqlserver_cdc._not_supported('maintenance_facts')) }}
{%- endmacro %}

{% macro spark__maintenance_facts(relations) -%}
    {%- set ledger = sqlserver_cdc.maintenance_relation() -%}
    {% do run_query('create schema if not exists ' ~ ledger.schema) %}
    {% do run_query(sqlserver_cdc._maintenance_ddl(ledger)) %}
    {%- set last = {} -%}
    {%- for row in run_query("select relation, to_json(struct("
        ~ "max(started_at) as at, max_by(files_after, started_at) as files_after,"
        ~ " max_by(files_after, started_at) filter (where compacted) as compacted_files,"
        ~ " max(started_at) filter (where vacuumed) as vacuumed_at, max_by(modified_after, started_at) as modified_after,"
        ~ " max_by(removed_through, started_at) as removed_through,"
        ~ " max_by(disk_bytes_after - bytes_after, started_at) as reclaimable)) from " ~ ledger ~ " group by relation") -%}
        {%- do last.update({row[0]: fromjson(row[1])}) -%}
    {%- endfor -%}
    {%- set tables = [] -%}
    {%- for r in relations -%}
        {%- set name = sqlserver_cdc._maintained_relation(r) -%}
        {%- if name is not none -%}
            {%- do tables.append(sqlserver_cdc._table_detail(name, r.kind, last.get(name))) -%}
        {%- endif -%}
    {%- endfor -%}
    {%- set staged = [] -%}
    {%- for r in relations if r.kind == 'staging' and sqlserver_cdc._maintained_relation(r) is not none -%}
        {%- do staged.append(r.relation) -%}
    {%- endfor -%}
    {%- set through = {} -%}
    {%- if staged -%}
        {%- for row in run_query("select model_name, max_by(watermark_batch, recorded_at) from " ~ sqlserver_cdc.watermark_relation()
            ~ " where model_name in ('" ~ staged | join("', '") ~ "') group by model_name") -%}
            {%- do through.update({row[0]: row[1] or ''}) -%}
        {%- endfor -%}
    {%- endif -%}
    {%- set runs = sqlserver_cdc.ledger_relation() -%}
    {%- set ledger_row = run_query("select min(run_id), max_by(manifests_from, run_id) from " ~ runs).rows[0] -%}
    {%- set summary = run_query("select to_json(struct(max(started_at) as at)) from " ~ ledger).rows[0][0] -%}
    {%- set report = {'tables': tables, 'staged_through': through, 'staging': staged, 'first_run': ledger_row[0],
        'manifests_from': ledger_row[1] or '', 'last_maintained': fromjson(summary).get('at')} -%}
    {{ log('sqlserver_cdc.maintenance_facts ' ~ tojson(report), info=true) }}
{%- endmacro %}

{#- The relation of a maintained table ({relation, kind}: a model by its name, else schema.table),
    none when it does not exist. -#}
{% macro _maintained_relation(r) -%}
    {%- set ledgers = {'ledger': sqlserver_cdc.ledger_relation, 'watermarks': sqlserver_cdc.watermark_relation,
        'maintenance': sqlserver_cdc.maintenance_relation} -%}
    {%- set node = graph.nodes.values() | selectattr('resource_type', 'equalto', 'model')
        | selectattr('name', 'equalto', r.relation) | first -%}
    {%- if r.kind in ledgers -%}
        {%- set relation = ledgers[r.kind]() -%}
        {%- set parts = [relation.schema, relation.identifier] -%}
    {%- elif node is defined and node is not none -%}
        {%- set parts = [node.schema, node.alias] -%}
    {%- else -%}
        {%- set parts = r.relation.split('.') -%}
    {%- endif -%}
    {%- if parts | length != 2 or not run_query("show tables in " ~ parts[0] ~ " like '" ~ parts[1] ~ "'").rows -%}
        {{ return(none) }}
    {%- endif -%}
    {{ return(parts | join('.')) }}
{%- endmacro %}

{#- DESCRIBE DETAIL of `relation` as the pass reads it (files, bytes, the time of its last commit,
    its retention properties), with the maintenance ledger's last row for it. -#}
{% macro _table_detail(relation, kind, last=none) -%}
    {%- set detail = run_query('describe detail ' ~ relation) -%}
    {%- set row = detail.rows[0] -%}
    {%- set columns = detail.column_names -%}
    {#- a map reaches Jinja as JSON text (dbt's result tables) -#}
    {%- set properties = sqlserver_cdc._json_map(row[columns.index('properties')]) -%}
    {%- set kept = {} -%}
    {%- for key in ['delta.deletedFileRetentionDuration', 'delta.logRetentionDuration'] if key in properties -%}
        {%- do kept.update({key: properties[key]}) -%}
    {%- endfor -%}
    {%- set modified = row[columns.index('lastModified')] -%}
    {{ return({'relation': relation, 'kind': kind, 'files': row[columns.index('numFiles')] | int,
        'bytes': row[columns.index('sizeInBytes')] | int, 'location': row[columns.index('location')],
        'modified': modified | string if modified is not none else none, 'properties': kept, 'last': last}) }}
{%- endmacro %}

{#- The maintenance ledger's DDL. -#}
{% macro _maintenance_ddl(relation) -%}
    {%- set columns = [] -%}
    {%- for c in sqlserver_cdc._maintenance_columns() -%}{%- do columns.append(c[0] ~ ' ' ~ c[1]) -%}{%- endfor -%}
    create table if not exists {{ relation }} ({{ columns | join(', ') }}) using delta
{%- endmacro %}

{#- Used by the runner (dbt run-operation): one table's task of a pass (runner/run/maintenance.py
    Task), in this order: the retention properties set, the raw table's expired landed rows
    deleted (raw: {before, through}), OPTIMIZE (compact), VACUUM (vacuum); then its row in the
    maintenance ledger, reported as `sqlserver_cdc.maintain_table {...}`. Each statement is one
    Delta commit, or (VACUUM) a deletion of files no version within the retention references:
    a task killed halfway leaves the table readable and is done again by the next pass. -#}
{% macro maintain_table(relation, kind, reason='', before={}, properties={}, raw=none, compact=false, vacuum=false,
        removed_through=none) -%}
    {{ return(adapter.dispatch('maintain_table', 'sqlserver_cdc')(relation, kind, reason, before, properties, raw, compact,
        vacuum, removed_through)) }}
{%- endmacro %}

{% macro default__maintain_table(relation, kind, reason, before, properties, raw, compact, vacuum, removed_through) -%}
    {{ exceptions.raise_compiler_error(sqlserver_cdc._not_supported('maintain_table')) }}
{%- endmacro %}

{% macro spark__maintain_table(relation, kind, reason, before, properties, raw, compact, vacuum, removed_through) -%}
    {%- set started = modules.datetime.datetime.utcnow() -%}
    {%- set version = run_query('describe history ' ~ relation ~ ' limit 1').rows[0][0] | int -%}
    {%- set row = {'raw_rows_deleted': none, 'raw_held_from': none} -%}
    {%- if properties -%}
        {%- set pairs = [] -%}
        {%- for key, value in properties.items() | sort -%}
            {%- do pairs.append("'" ~ key ~ "' = " ~ sqlserver_cdc._sql_string(value)) -%}
        {%- endfor -%}
        {% do run_query('alter table ' ~ relation ~ ' set tblproperties (' ~ pairs | join(', ') ~ ')') %}
    {%- endif -%}
    {%- if raw is not none -%}
        {%- set kept = "landing_kind not in ('landed_files', 'kafka_offsets')" -%}
        {%- set taken = [] -%}
        {%- for source in raw.sources -%}
            {%- do taken.append("(landing_kind = " ~ sqlserver_cdc._sql_string(source.kind)
                ~ ((" and lower(entity) in ('" ~ source.entities | join("', '") ~ "')") if source.entities else '')
                ~ " and _batch_id <= " ~ sqlserver_cdc._sql_string(source.through) ~ ")") -%}
        {%- endfor -%}
        {%- set expired = kept ~ ' and _batch_id < ' ~ sqlserver_cdc._sql_string(raw.before) ~ ' and ('
            ~ taken | join(' or ') ~ ')' -%}
        {#- one scan of the batch ids: the rows that go, and the oldest batch of those that stay -#}
        {%- set found = run_query('select count_if(' ~ expired ~ '), min(_batch_id) filter (where not (' ~ expired ~ ')) from '
            ~ relation ~ ' where ' ~ kept).rows[0] -%}
        {%- set count = found[0] | int -%}
        {%- if count > 0 -%}
            {#- recorded before the rows go, so a pass killed in between never lets --restage through -#}
            {%- set held = found[1] or raw.before -%}
            {% do sqlserver_cdc._record_ledger_properties({'sqlserver_cdc.raw_held_from': held}) %}
            {% do run_query('delete from ' ~ relation ~ ' where ' ~ expired) %}
            {%- do row.update({'raw_rows_deleted': count, 'raw_held_from': held}) -%}
        {%- else -%}
            {%- do row.update({'raw_rows_deleted': 0}) -%}
        {%- endif -%}
    {%- endif -%}
    {%- if compact -%}
        {% do adapter.execute('optimize ' ~ relation, auto_begin=false, fetch=false) %}
    {%- endif -%}
    {%- if vacuum -%}
        {#- VACUUM lists the table's folder in as many tasks as this setting says (Spark's default:
            10,000, two minutes for a table of 100 files on two cores) -#}
        {% do run_query('set spark.sql.sources.parallelPartitionDiscovery.parallelism = ' ~ var('cdc_vacuum_listing_tasks', 4)) %}
        {% do adapter.execute('vacuum ' ~ relation, auto_begin=false, fetch=false) %}
        {% do run_query('reset spark.sql.sources.parallelPartitionDiscovery.parallelism') %}
    {%- endif -%}
    {%- do row.update(sqlserver_cdc._maintenance_metrics(relation, version)) -%}
    {%- set after = sqlserver_cdc._table_detail(relation, kind) -%}
    {%- set ended = modules.datetime.datetime.utcnow() -%}
    {%- do row.update({'started_at': started.strftime('%Y-%m-%d %H:%M:%S.%f'), 'ended_at': ended.strftime('%Y-%m-%d %H:%M:%S.%f'),
        'seconds': (ended - started).total_seconds(), 'relation': relation, 'kind': kind, 'reason': reason,
        'files_before': before.get('files'), 'bytes_before': before.get('bytes'), 'files_after': after.files,
        'bytes_after': after.bytes, 'disk_bytes_after': sqlserver_cdc._disk_bytes(after.location),
        'properties_set': properties.keys() | sort, 'compacted': compact, 'vacuumed': vacuum,
        'modified_after': after.modified, 'removed_through': removed_through}) -%}
    {% do run_query(sqlserver_cdc._maintenance_insert(row)) %}
    {{ log('sqlserver_cdc.maintain_table ' ~ tojson(row), info=true) }}
{%- endmacro %}

{#- What the table's commits after `version` (a task's: OPTIMIZE, VACUUM START and END) did, from
    DESCRIBE HISTORY's operation metrics. -#}
{% macro _maintenance_metrics(relation, version) -%}
    {%- set found = {'compaction_files_removed': none, 'compaction_files_added': none, 'deletion_vectors_purged': none,
        'vacuum_files_deleted': none, 'vacuum_bytes_deleted': none} -%}
    {%- set history = run_query('describe history ' ~ relation ~ ' limit 8') -%}
    {%- set columns = history.column_names -%}
    {%- for h in history.rows if h[columns.index('version')] | int > version -%}
        {%- set metrics = sqlserver_cdc._json_map(h[columns.index('operationMetrics')]) -%}
        {%- set operation = h[columns.index('operation')] -%}
        {%- if operation == 'OPTIMIZE' -%}
            {%- do found.update({'compaction_files_removed': metrics.get('numRemovedFiles', 0) | int,
                'compaction_files_added': metrics.get('numAddedFiles', 0) | int,
                'deletion_vectors_purged': metrics.get('numDeletionVectorsRemoved', 0) | int}) -%}
        {%- elif operation == 'VACUUM START' -%}
            {%- do found.update({'vacuum_bytes_deleted': metrics.get('sizeOfDataToDelete', 0) | int}) -%}
        {%- elif operation == 'VACUUM END' -%}
            {%- do found.update({'vacuum_files_deleted': metrics.get('numDeletedFiles', 0) | int}) -%}
        {%- endif -%}
    {%- endfor -%}
    {{ return(found) }}
{%- endmacro %}

{#- The bytes of a table's files on disk (its data files and deletion vectors, live or removed;
    not its log): what VACUUM may reclaim is this less the live bytes. -#}
{% macro _disk_bytes(location) -%}
    {{ return(run_query('select coalesce(sum(length), 0) from binaryFile.`' ~ location ~ '`').rows[0][0] | int) }}
{%- endmacro %}

{#- The INSERT of a maintenance ledger row (a JSON literal read with the ledger's schema). -#}
{% macro _maintenance_insert(row) -%}
    {%- set columns = [] -%}
    {%- for c in sqlserver_cdc._maintenance_columns() -%}{%- do columns.append(c[0] ~ ': ' ~ c[1]) -%}{%- endfor -%}
    insert into {{ sqlserver_cdc.maintenance_relation() }}
    select inline(from_json({{ sqlserver_cdc._sql_string(tojson([row])) }}, 'array<struct<{{ columns | join(", ") }}>>'))
{%- endmacro %}

{#- Used by the runner (dbt run-operation) at the end of a maintenance pass: records on the run
    ledger's table properties when it started (`at`, UTC), which each run's open_run reads (the
    summary's overdue warning). (maintain_table records there the oldest batch the raw table holds
    once its retention deleted landed rows, which --restage is refused for.) -#}
{% macro record_maintenance(at) -%}
    {{ return(adapter.dispatch('record_maintenance', 'sqlserver_cdc')(at)) }}
{%- endmacro %}

{% macro default__record_maintenance(at) -%}
    {{ exceptions.raise_compiler_error(sqlserver_cdc._not_supported('record_maintenance')) }}
{%- endmacro %}

{% macro spark__record_maintenance(at) -%}
    {% do sqlserver_cdc._record_ledger_properties({'sqlserver_cdc.maintained_at': at}) %}
{%- endmacro %}

{#- Sets table properties of the run ledger (when it exists). -#}
{% macro _record_ledger_properties(properties) -%}
    {%- set ledger = sqlserver_cdc.ledger_relation() -%}
    {%- if run_query("show tables in " ~ ledger.schema ~ " like '" ~ ledger.identifier ~ "'").rows -%}
        {%- set pairs = [] -%}
        {%- for key, value in properties.items() | sort -%}
            {%- do pairs.append("'" ~ key ~ "' = " ~ sqlserver_cdc._sql_string(value)) -%}
        {%- endfor -%}
        {% do run_query('alter table ' ~ ledger ~ ' set tblproperties (' ~ pairs | join(', ') ~ ')') %}
    {%- endif -%}
{%- endmacro %}
