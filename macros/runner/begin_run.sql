{#- Used by the runner (dbt run-operation) after open_run: lands the files the runner accepted
    (land_files; first_records: see there) with the run's batch id and reports the facts the run
    is planned from as one log line `sqlserver_cdc.begin_run <json>`. Its keys are runner/run/plan.py's Facts fields (their meaning is
    written there, once) but those the runner decides before (INTAKE_FACTS); the runner refuses a
    report of another shape.
    Reads only the batches landed after the previous run (Delta skips earlier files by their
    _batch_id statistics) and small tables. -#}
{% macro begin_run(files, batch_id, raw_schema=none, first_records=false) -%}
    {{ return(adapter.dispatch('begin_run', 'sqlserver_cdc')(files=files, batch_id=batch_id, raw_schema=raw_schema, first_records=first_records)) }}
{%- endmacro %}

{% macro spark__begin_run(files, batch_id, raw_schema=none, first_records=false) -%}
    {%- set raw_schema = raw_schema or var('cdc_raw_schema', target.schema ~ '_raw') -%}
    {%- set raw = raw_schema ~ '.landed_rows' -%}
    {%- set ledger = sqlserver_cdc.ledger_relation() -%}
    {%- do sqlserver_cdc.land_files(files, batch_id, raw_schema, first_records) -%}
    {%- set landed_now = {} -%}
    {%- for row in run_query(sqlserver_cdc.landed_batch_counts(batch_id, raw_schema)) -%}
        {%- do landed_now.update({sqlserver_cdc._dbkey(row[3], row[0] ~ '/' ~ row[1]): row[2] | int}) -%}
    {%- endfor -%}
    {%- set previous = sqlserver_cdc._previous_run(ledger) -%}
    {%- set since = previous.run_id if previous else '' -%}
    {%- set tables = sqlserver_cdc._declared_tables() -%}
    {%- set facts = sqlserver_cdc._arrivals(raw, since, (previous or {}).get('manifests_from') or '', tables) -%}
    {%- set relations = [] -%}
    {%- for row in run_query('show tables in ' ~ target.schema) if not row[2] -%}
        {%- do relations.append(row[1] | lower) -%}
    {%- endfor -%}
    {%- set watermarks = {} -%}
    {%- for row in run_query('select model_name, source_database, max_by(watermark_lsn, recorded_at), max_by(watermark_batch, recorded_at),'
        ~ ' max_by(declaration, recorded_at) from ' ~ sqlserver_cdc.watermark_relation() ~ ' group by model_name, source_database') -%}
        {%- do watermarks.update({sqlserver_cdc._dbkey(row[1], row[0]): {'lsn': row[2], 'batch': row[3], 'declaration': row[4]}}) -%}
    {%- endfor -%}
    {%- set seeds = {} -%}
    {%- for node in graph.nodes.values() if node.resource_type == 'seed' -%}
        {%- do seeds.update({node.name: {'relation': node.alias | lower, 'checksum': node.checksum.checksum}}) -%}
    {%- endfor -%}
    {#- whether an incremental run has audit tests to leave out (dbt warns of a selector matching none) -#}
    {%- set audit = namespace(tagged=false) -%}
    {%- for node in graph.nodes.values() if 'cdc_audit' in (node.tags or []) -%}
        {%- set audit.tagged = true -%}
    {%- endfor -%}
    {%- set quarantine = graph.nodes.values() | selectattr('resource_type', 'equalto', 'model')
        | selectattr('name', 'equalto', 'cdc_quarantine') | first -%}
    {%- set retention = {} -%}
    {%- for row in run_query("select coalesce(source_database, ''), max_by(row_values['retention'], _batch_id) from " ~ raw
            ~ " where landing_kind = 'cdc_metadata' and lower(entity) = 'cdc_jobs'"
            ~ " and lower(row_values['job_type']) = 'cleanup' and _batch_id > " ~ sqlserver_cdc._sql_string(since)
            ~ " group by 1") if row[1] is not none -%}
        {%- do retention.update({row[0]: row[1]}) -%}
    {%- endfor -%}
    {%- do facts.update({
        'run_id': batch_id, 'tables': tables, 'previous': previous, 'landed_now': landed_now,
        'watermarks': watermarks, 'relations': relations,
        'instance_min_lsn': sqlserver_cdc._instance_min_lsn(raw, since, 'stg_cdc_metadata__change_tables' in relations),
        'late_commit_times': sqlserver_cdc._late_commit_times(raw, since, tables, watermarks, relations),
        'cdc_jobs_retention': retention, 'database_names': sqlserver_cdc._database_names(),
        'captured_columns': sqlserver_cdc._tenant_captured_columns(raw, since, tables, 'stg_cdc_metadata__captured_columns' in relations),
        'views_digest': local_md5(tojson(var('cdc_tracked_tables', {}), sort_keys=true) ~ tojson(var('cdc_databases', {}), sort_keys=true)
            ~ (quarantine.raw_code if quarantine else '')),
        'seeds': seeds, 'audit_tagged': audit.tagged}) -%}
    {{ log('sqlserver_cdc.begin_run ' ~ tojson(facts), info=true) }}
{%- endmacro %}

{% macro default__begin_run(files, batch_id, raw_schema=none, first_records=false) -%}
    {{ exceptions.raise_compiler_error(sqlserver_cdc._not_supported('begin_run')) }}
{%- endmacro %}

{#- The previous run's ledger row (see begin_run), none before the first: the fields the next
    plan continues from, as the ledger holds them (runner/run/plan.py _previous reads them). -#}
{% macro _previous_run(ledger) -%}
    {%- set rows = run_query("select to_json(struct(run_id, landed_through as landed, exported_lsn, manifests_from, tables,"
        ~ " streams, landed_lsn, upper_batch, retention_minutes)) from " ~ ledger ~ " where run_id = (select max(run_id) from "
        ~ ledger ~ " where status in ('succeeded', 'failed', 'nothing_to_do'))").rows -%}
    {{ return(fromjson(rows[0][0]) if rows else none) }}
{%- endmacro %}

{#- The tracked tables as the plan needs them (see begin_run): name, channel, instances, the ids of
    the databases it reads, tenant, and the digest of its declaration: of what shapes its marts
    (its columns, options, its one database's id; not which databases a tenant table reads, so a
    tenant joins without a rebuild), `tenant:`-prefixed for a tenant table (runner/run/plan.py
    rebuilds a mart whose shape changed). -#}
{% macro _declared_tables() -%}
    {%- set tables = [] -%}
    {%- for name in var('cdc_tracked_tables', {}) | sort -%}
        {%- set t = sqlserver_cdc.tracked_table(name) -%}
        {%- set instances = [] -%}
        {%- for i in t.instances -%}{%- do instances.append({'name': i.name | lower, 'dropped': i.dropped}) -%}{%- endfor -%}
        {%- set ids = t.databases | map(attribute='id') | list -%}
        {%- set shaped = {} -%}
        {%- for k, v in t.items() if k not in ('databases', 'tenant') -%}{%- do shaped.update({k: v}) -%}{%- endfor -%}
        {%- if ids != [''] and not t.tenant -%}{%- do shaped.update({'database': ids[0]}) -%}{%- endif -%}
        {%- set captured = [] -%}
        {%- for i in t.instances if t.tenant -%}
            {%- for c in i.columns -%}{%- do captured.append([i.name | lower, c.source | lower, c.type | lower, c.ordinal]) -%}{%- endfor -%}
        {%- endfor -%}
        {%- do tables.append({'name': name, 'channel': t.channel, 'instances': instances, 'databases': ids, 'tenant': t.tenant,
            'captured': captured, 'digest': ('tenant:' if t.tenant else '') ~ local_md5(tojson(shaped, sort_keys=true))}) -%}
    {%- endfor -%}
    {{ return(tables) }}
{%- endmacro %}

{#- The databases' names by id (runner/run/plan.py Facts.database_names): '' the default one's. -#}
{% macro _database_names() -%}
    {%- set names = {} -%}
    {%- for name, db in sqlserver_cdc._databases().items() -%}{%- do names.update({db.id: name}) -%}{%- endfor -%}
    {{ return(names) }}
{%- endmacro %}

{#- What landed after batch `since` (see begin_run): {arrived, manifests, snapshots,
    event_arrivals}. arrived: per source, keyed dbkey(database, source) (_dbkey), {lsn, batch,
    records}: change_tables/<instance> (the largest __$start_lsn), snapshots/<table>,
    cdc_metadata/<entity> (lsn_time_mapping: the largest start_lsn). manifests and snapshots
    carry their database. event_arrivals: the event lines of each declared event channel,
    grouped (_event_arrivals), as [channel, database, route, complete, snapshot_end, lsn, batch,
    records, min_lsn] rows, which runner/run/plan.py event_arrivals reads. -#}
{% macro _arrivals(raw, since, manifests_from, tables) -%}
    {%- set since_sql = sqlserver_cdc._sql_string(since) -%}
    {%- set arrived, manifests, snapshots = {}, [], [] -%}
    {%- set query -%}
        select source_database, source, max(lsn), max(_batch_id), count(*), max(after_lsn), min(lsn)
        from (
            select
                source_database,
                concat(landing_kind, '/', lower(entity)) as source,
                case
                    when landing_kind = 'change_tables' then {{ sqlserver_cdc.lsn_normalize("row_values['__$start_lsn']", 'string') }}
                    when entity = 'lsn_time_mapping' then {{ sqlserver_cdc.lsn_normalize("row_values['start_lsn']", 'string') }}
                end as lsn,
                cast(null as string) as after_lsn,
                _batch_id
            from {{ raw }}
            where landing_kind in ('change_tables', 'snapshots', 'cdc_metadata') and _batch_id > {{ since_sql }}
            union all
            -- each export manifest (docs/landing.md "Export manifests") and each snapshot manifest
            select source_database, concat(landing_kind, '/', lower(entity), '/', _source_file), row_values['through_lsn'],
                row_values['after_lsn'], _batch_id
            from {{ raw }}
            where landing_kind = 'manifest'
                and _batch_id {{ ('>= ' ~ sqlserver_cdc._sql_string(manifests_from)) if manifests_from else ('> ' ~ since_sql) }}
            union all
            select source_database, concat(landing_kind, '/', lower(entity), '/', _source_file), row_values['snapshot_lsn'], null,
                _batch_id
            from {{ raw }}
            where landing_kind = 'snapshot_manifest'
        ) as landed
        group by source_database, source
    {%- endset -%}
    {%- for row in run_query(query) -%}
        {%- set db = row[0] or '' -%}
        {%- set parts = row[1].split('/', 2) -%}
        {%- if parts[0] == 'manifest' -%}
            {%- do manifests.append({'instance': parts[1], 'after_lsn': row[5], 'through_lsn': row[2], 'batch': row[3], 'database': db}) -%}
        {%- elif parts[0] == 'snapshot_manifest' -%}
            {%- do snapshots.append({'table': parts[1], 'lsn': row[2], 'batch': row[3], 'database': db}) -%}
        {%- else -%}
            {%- do arrived.update({sqlserver_cdc._dbkey(db, row[1]): {'lsn': row[2], 'min_lsn': row[6], 'batch': row[3], 'records': row[4] | int}}) -%}
        {%- endif -%}
    {%- endfor -%}
    {%- set events = [] -%}
    {%- for channel in ['ces', 'debezium'] -%}
        {%- set routed = tables | selectattr('channel', 'equalto', channel) | list -%}
        {%- for row in (run_query(sqlserver_cdc._event_arrivals(channel, raw, since_sql, routed)) if routed else []) -%}
            {%- do events.append([channel, row[0], row[1], row[2], row[3], row[4], row[5], row[6] | int, row[7]]) -%}
        {%- endfor -%}
    {%- endfor -%}
    {{ return({'arrived': arrived, 'manifests': manifests, 'snapshots': snapshots, 'event_arrivals': events}) }}
{%- endmacro %}

{#- A per-database key (runner/run/plan.py dbkey): `key` for the default database (none or ''),
    `databases/<database>/<key>` for another. -#}
{% macro _dbkey(database, key) -%}
    {{ return(('databases/' ~ database ~ '/' ~ key) if database else key) }}
{%- endmacro %}

{#- The event lines of `channel` landed after `since` grouped by the tracked table they route to
    (`routed`, by the staging models' own rule, _event_route; '?' for a CES segment whose message
    is not reassembled yet): route, complete, snapshot_end, lsn, batch, records. CES lines are
    routed by their data's eventsource (read as text: a segment of a split message holds only
    part of it); Debezium lines are decoded as the events model decodes them, without its replay
    check: a replay repeats its change's table and LSNs, so the LSN bounds are the same (its
    count and batch may add to its table's, which costs at most a build that finds it a
    duplicate). -#}
{% macro _event_arrivals(channel, raw, since_sql, routed) -%}
    {%- set lines = '(select * from ' ~ raw ~ " where landing_kind = '" ~ channel ~ "' and _batch_id > " ~ since_sql ~ ') as since_batch' -%}
    select database, route, complete, snapshot_end, max(commit_lsn), max(_batch_id), count(*), min(commit_lsn)
    from (
        select
            {{ sqlserver_cdc._event_database(channel) }} as database,
            case
                {%- for t in routed %}
                when {{ sqlserver_cdc._event_route(sqlserver_cdc.tracked_table(t.name)) }} then '{{ t.name }}'
                {%- endfor %}
                {%- if channel == 'ces' %}
                when commit_lsn is not null and source_table is null then '?'
                {%- endif %}
            end as route,
            coalesce(status = 'complete' and commit_lsn is not null, false) as complete,
            {{ "coalesce(snapshot_marker = 'last', false)" if channel == 'debezium' else 'false' }} as snapshot_end,
            commit_lsn,
            _batch_id
        from (
            {%- if channel == 'ces' %}
            select
                _batch_id,
                'complete' as status,
                case when row_values['logicalid'] rlike '{{ sqlserver_cdc._ces_logicalid_pattern() }}'
                    then upper(element_at(split(row_values['logicalid'], ':'), -2)) end as commit_lsn,
                get_json_object(row_values['data'], '$.eventsource.db') as source_database,
                get_json_object(row_values['data'], '$.eventsource.schema') as source_schema,
                get_json_object(row_values['data'], '$.eventsource.tbl') as source_table,
                row_values['logicalid'] as logicalid
            from {{ lines }}
            {%- else %}
            {{ sqlserver_cdc.debezium_events(lines, deduplicate=false) }}
            {%- endif %}
        ) as events
    ) as routed_events
    group by database, route, complete, snapshot_end
{%- endmacro %}

{#- Per capture instance of each database, keyed dbkey(database, lower-case instance), the low end
    of its validity interval: the start_lsn of its latest cdc.change_tables export, staged or landed
    since `since`. -#}
{% macro _instance_min_lsn(raw, since, staged) -%}
    {%- set found = {} -%}
    {%- set query -%}
        select source_database, lower(capture_instance), max_by(start_lsn, ingested_at)
        from (
            {%- if staged %}
            select source_database, capture_instance, start_lsn, _ingested_at as ingested_at
            from {{ sqlserver_cdc._model_relation('stg_cdc_metadata__change_tables') }}
            where quarantine_reason is null
            union all
            {%- endif %}
            select source_database, row_values['capture_instance'] as capture_instance,
                {{ sqlserver_cdc.lsn_normalize("row_values['start_lsn']", 'string') }} as start_lsn, _ingested_at as ingested_at
            from {{ raw }}
            where landing_kind = 'cdc_metadata' and entity = 'change_tables' and _batch_id > {{ sqlserver_cdc._sql_string(since) }}
        ) as exported
        where capture_instance is not null and start_lsn is not null
        group by source_database, lower(capture_instance)
    {%- endset -%}
    {%- for row in run_query(query) -%}{%- do found.update({sqlserver_cdc._dbkey(row[0], row[1]): row[2]}) -%}{%- endfor -%}
    {{ return(found) }}
{%- endmacro %}

{#- A model's relation by name, from the graph (operations and hooks have no ref). -#}
{% macro _model_relation(name) -%}
    {%- set node = graph.nodes.values() | selectattr('resource_type', 'equalto', 'model')
        | selectattr('name', 'equalto', name) | first -%}
    {%- if node is not defined or node is none -%}
        {{ exceptions.raise_compiler_error("model " ~ name ~ " is not in the project") }}
    {%- endif -%}
    {{ return(node.relation_name) }}
{%- endmacro %}

{#- Per change-table table and database it reads, keyed dbkey(database, table), the smallest commit
    LSN of its trusted staged changes of that database whose lsn_time_mapping row landed after
    batch `since` for the first time (no trusted staged row of that LSN yet) at or below the
    table's marts' watermark there: they were applied without a commit time, and the plan rebuilds
    the table's marts to give them one (runner/run/plan.py _late). Reads this run's mapping rows;
    only when some are new and at or below a watermark of their database, the staged mapping and
    the tables' staging at those LSNs (Delta skips the other files): one query, then two per
    database that has such rows. -#}
{% macro _late_commit_times(raw, since, tables, watermarks, relations) -%}
    {%- set marks = {} -%}
    {%- for t in tables if t.channel == 'change_tables' and ('stg_change_tables__' ~ t.name) | lower in relations -%}
        {%- for db in t.databases -%}
            {%- set lsns = [] -%}
            {%- for m in [t.name ~ '_current', t.name ~ '_history'] -%}
                {%- set w = watermarks.get(sqlserver_cdc._dbkey(db, m)) -%}
                {%- if w and w.lsn -%}{%- do lsns.append(w.lsn) -%}{%- endif -%}
            {%- endfor -%}
            {%- if lsns -%}{%- do marks.update({sqlserver_cdc._dbkey(db, t.name): {'table': t, 'db': db, 'lsn': lsns | max}}) -%}{%- endif -%}
        {%- endfor -%}
    {%- endfor -%}
    {%- if not marks or 'stg_cdc_metadata__lsn_time_mapping' not in relations -%}{{ return({}) }}{%- endif -%}
    {%- set s = sqlserver_cdc._sql_string -%}
    {%- set highest = {} -%}
    {%- for m in marks.values() -%}
        {%- do highest.update({m.db: [highest.get(m.db, ''), m.lsn] | max}) -%}
    {%- endfor -%}
    {%- set values = [] -%}
    {%- for db, lsn in highest.items() | sort -%}{%- do values.append('(' ~ s(db) ~ ', ' ~ s(lsn) ~ ')') -%}{%- endfor -%}
    {%- set landed -%}
        select distinct coalesce(source_database, '') as db, {{ sqlserver_cdc.lsn_normalize("row_values['start_lsn']", 'string') }} as lsn
        from {{ raw }}
        where landing_kind = 'cdc_metadata' and entity = 'lsn_time_mapping' and _batch_id > {{ s(since) }}
            and row_values['tran_end_time'] is not null
    {%- endset -%}
    {%- set bounds = run_query('select landed.db, min(landed.lsn), max(landed.lsn) from (' ~ landed ~ ') as landed join (values '
        ~ values | join(', ') ~ ') as marks (db, mark) on landed.db = marks.db and landed.lsn <= marks.mark group by landed.db').rows -%}
    {%- set names = sqlserver_cdc._database_names() -%}
    {%- set found = {} -%}
    {%- for db, low, high in bounds if low is not none -%}
        {%- set query -%}
            select landed.lsn from ({{ landed }}) as landed
            left anti join (
                select start_lsn from {{ sqlserver_cdc._model_relation('stg_cdc_metadata__lsn_time_mapping') }}
                where quarantine_reason is null and coalesce(source_database, '') = {{ s(db) }}
                    and start_lsn between {{ s(low) }} and {{ s(high) }}
            ) as staged
                on landed.lsn = staged.start_lsn
            where landed.db = {{ s(db) }} and landed.lsn between {{ s(low) }} and {{ s(high) }}
            order by landed.lsn
            limit 1001
        {%- endset -%}
        {%- set new = run_query(query).columns[0].values() | list -%}
        {%- if new -%}
            {#- beyond a thousand, the range of them: a table with a change in it rebuilds -#}
            {%- set literals = [] -%}
            {%- for lsn in new[:1000] -%}{%- do literals.append(s(lsn)) -%}{%- endfor -%}
            {%- set within = ('commit_lsn in (' ~ literals | join(', ') ~ ')') if new | length <= 1000
                else ('commit_lsn between ' ~ s(new[0]) ~ ' and ' ~ s(high)) -%}
            {%- set selects = [] -%}
            {%- for key, m in marks.items() | sort if m.db == db -%}
                {%- set tenant = (" and source_database = " ~ s(names.get(db, db))) if m.table.tenant else '' -%}
                {%- do selects.append("select " ~ s(key) ~ " as name, min(commit_lsn) as lsn from "
                    ~ sqlserver_cdc._model_relation('stg_change_tables__' ~ m.table.name) ~ " where quarantine_reason is null and "
                    ~ within ~ tenant ~ " and commit_lsn <= " ~ s(m.lsn)) -%}
            {%- endfor -%}
            {%- for row in run_query(selects | join('\nunion all\n')) if row[1] -%}
                {%- do found.update({row[0]: row[1]}) -%}
            {%- endfor -%}
        {%- endif -%}
    {%- endfor -%}
    {{ return(found) }}
{%- endmacro %}

{#- The columns the tenant tables' capture instances capture in each of their databases, as their
    cdc.captured_columns exports say (staged, and landed since `since` with capture_instance):
    [database id, instance, column, type, ordinal] rows (runner/run/plan.py _captured_otherwise
    compares them with the shared declaration). None read without a tenant table. -#}
{% macro _tenant_captured_columns(raw, since, tables, staged) -%}
    {%- set instances = [] -%}
    {%- for t in tables if t.tenant and t.channel == 'change_tables' -%}
        {%- for i in t.instances if i.name not in instances -%}{%- do instances.append(i.name) -%}{%- endfor -%}
    {%- endfor -%}
    {%- if not instances -%}{{ return([]) }}{%- endif -%}
    {%- set wanted = "lower(capture_instance) in ('" ~ instances | join("', '") ~ "')" -%}
    {%- set query -%}
        select coalesce(source_database, ''), lower(capture_instance), lower(column_name),
            max_by(column_type, landed), max_by(column_ordinal, landed)
        from (
            {%- if staged %}
            select source_database, capture_instance, column_name, column_type, column_ordinal, _batch_id as landed
            from {{ sqlserver_cdc._model_relation('stg_cdc_metadata__captured_columns') }}
            where quarantine_reason is null and {{ wanted }}
            union all
            {%- endif %}
            select source_database, row_values['capture_instance'] as capture_instance, row_values['column_name'] as column_name,
                row_values['column_type'] as column_type, try_cast(row_values['column_ordinal'] as int) as column_ordinal,
                _batch_id as landed
            from {{ raw }}
            where landing_kind = 'cdc_metadata' and entity = 'captured_columns' and _batch_id > {{ sqlserver_cdc._sql_string(since) }}
                and {{ wanted | replace('capture_instance', "row_values['capture_instance']") }}
        ) as captured
        where column_name is not null and column_ordinal is not null
        group by 1, 2, 3
    {%- endset -%}
    {%- set rows = [] -%}
    {%- for row in run_query(query) -%}{%- do rows.append([row[0], row[1], row[2], row[3], row[4]]) -%}{%- endfor -%}
    {{ return(rows) }}
{%- endmacro %}
