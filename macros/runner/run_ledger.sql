{#- The run ledger (docs/operations.md "The run ledger"): one row per runner run in <target schema>.cdc_runs
    (var cdc_ledger_table), a Delta table. begin_run writes the row before the build with the
    window the run applies; the models and hooks of that build read the window from it (var
    cdc_runner, which the runner sets); finish_run (on-run-end) closes it with the outcome and
    the per-table counts. status: running (begun, not finished), succeeded, failed,
    nothing_to_do (nothing landed and every mart at its bound: no build), abandoned (a run that
    never finished, e.g. killed; its landed batches are taken in and counted by the next run). -#}
{% macro ledger_relation() -%}
    {{ return(api.Relation.create(
        database=none,
        schema=target.schema,
        identifier=var('cdc_ledger_table', 'cdc_runs'),
        type='table')) }}
{%- endmacro %}

{% macro _ledger_ddl(relation) -%}
    create table if not exists {{ relation }} (
        run_id string,
        started_at timestamp,
        ended_at timestamp,
        status string,
        full_refresh boolean,
        since_run_id string,
        landed map<string, bigint>,
        landed_lsn map<string, string>,
        upper_lsn map<string, string>,
        upper_batch map<string, string>,
        tables array<struct<tracked_table: string, rows_landed: bigint, quarantined: bigint,
            changes_applied: bigint, lsn_reached: string, advanced: boolean, lag_seconds: bigint,
            current_rows: bigint, history_versions: bigint>>,
        streams array<struct<channel: string, lines_landed: bigint, duplicates: bigint,
            pending_messages: bigint, tombstones: bigint, quarantined: bigint, quarantined_total: bigint>>,
        failed_nodes array<string>,
        exported_lsn map<string, string>,
        manifests_from string,
        refused array<string>
    ) using delta
{%- endmacro %}

{#- Columns added to the ledger after its first release, with their types: a ledger created
    before them gets them added (Delta ADD COLUMNS), so upgrading needs no full refresh. -#}
{% macro _ledger_added_columns() -%}
    {{ return({'exported_lsn': 'map<string, string>', 'manifests_from': 'string', 'refused': 'array<string>'}) }}
{%- endmacro %}

{% macro _ledger_migrate(relation) -%}
    {%- set present = [] -%}
    {%- for row in run_query('describe table ' ~ relation) -%}
        {%- if not row[0] or row[0].startswith('#') -%}{%- break -%}{%- endif -%}
        {%- do present.append(row[0] | lower) -%}
    {%- endfor -%}
    {%- set missing = [] -%}
    {%- for name, type in sqlserver_cdc._ledger_added_columns().items() if name not in present -%}
        {%- do missing.append(name ~ ' ' ~ type) -%}
    {%- endfor -%}
    {%- if missing -%}
        {% do run_query('alter table ' ~ relation ~ ' add columns (' ~ missing | join(', ') ~ ')') %}
    {%- endif -%}
{%- endmacro %}

{#- The channels of the declared tracked tables, sorted. -#}
{% macro _declared_channels() -%}
    {%- set channels = [] -%}
    {%- for name, table in var('cdc_tracked_tables', {}).items() -%}
        {%- set channel = table.get('channel', 'change_tables') -%}
        {%- if channel not in channels -%}{%- do channels.append(channel) -%}{%- endif -%}
    {%- endfor -%}
    {{ return(channels | sort) }}
{%- endmacro %}

{#- True when a tracked table declares `channel` (the event channels' shared staging models are
    built only then). -#}
{% macro channel_declared(channel) -%}
    {{ return(channel in sqlserver_cdc._declared_channels()) }}
{%- endmacro %}

{% macro _json_map(value) -%}
    {{ return(fromjson(value) if value else {}) }}
{%- endmacro %}

{% macro _sql_map(values, value_type) -%}
    {%- if values -%}
    map({% for k, v in values.items() | sort %}{{ sqlserver_cdc._sql_string(k) }}, {{ 'cast(' ~ v ~ ' as bigint)' if value_type == 'bigint' else sqlserver_cdc._sql_string(v) }}{{ ', ' if not loop.last }}{% endfor %})
    {%- else -%}
    cast(map() as map<string, {{ value_type }}>)
    {%- endif -%}
{%- endmacro %}

{#- Used by the runner (dbt run-operation), the first of a run's two dbt invocations: lands the
    new files (land_files), decides the run's window once and writes the ledger row. Per channel
    the landed high-water mark is the previous run's, raised by the batches landed since (read
    by _batch_id, so only those are decoded): change tables the largest landed
    lsn_time_mapping.start_lsn, CES the largest logicalid LSN, Debezium the largest commit LSN;
    upper_lsn (--upper-lsn, any LSN form) replaces it as every channel's bound. An event
    channel's upper batch is the last landing batch holding its events. Without force (the
    runner's --full-refresh or --select), a run that landed nothing and whose marts are all at
    their bounds is recorded as nothing_to_do. `stopped`: why Kafka sources landed nothing (the
    runner landed the others before), recorded with the refused files. Logs one line, `sqlserver_cdc.begin_run <json>`,
    that the runner reads (with seeds_loaded: every seed of the project is in the warehouse, so
    an incremental build can leave them out). -#}
{% macro begin_run(files, batch_id, raw_schema=none, upper_lsn=none, force=false, full_refresh=false, stopped=[]) -%}
    {{ return(adapter.dispatch('begin_run', 'sqlserver_cdc')(files=files, batch_id=batch_id, raw_schema=raw_schema, upper_lsn=upper_lsn, force=force, full_refresh=full_refresh, stopped=stopped)) }}
{%- endmacro %}

{% macro spark__begin_run(files, batch_id, raw_schema=none, upper_lsn=none, force=false, full_refresh=false, stopped=[]) -%}
    {%- set ledger = sqlserver_cdc.ledger_relation() -%}
    {%- set raw = (raw_schema or var('cdc_raw_schema', target.schema ~ '_raw')) ~ '.landed_rows' -%}
    {% do run_query('create schema if not exists ' ~ ledger.schema) %}
    {% do run_query(sqlserver_cdc._ledger_ddl(ledger)) %}
    {% do sqlserver_cdc._ledger_migrate(ledger) %}
    {% do run_query(sqlserver_cdc.ensure_watermark_table()) %}
    {%- if run_query("select count(*) from " ~ ledger ~ " where status = 'running'").rows[0][0] > 0 %}
    {% do run_query("update " ~ ledger ~ " set status = 'abandoned', ended_at = current_timestamp() where status = 'running'") %}
    {%- endif %}
    {%- set landing = sqlserver_cdc.land_files(files, batch_id, raw_schema) -%}
    {%- set landed = {} -%}
    {%- for row in run_query(sqlserver_cdc.landed_batch_counts(batch_id, raw_schema)) -%}
        {%- do landed.update({row[0] ~ '/' ~ row[1]: row[2] | int}) -%}
    {%- endfor -%}
    {%- set previous = run_query("select max(run_id), max_by(to_json(landed_lsn), run_id), max_by(to_json(upper_batch), run_id),"
        ~ " max(run_id) filter (where status in ('succeeded', 'failed', 'nothing_to_do')),"
        ~ " max_by(to_json(exported_lsn), run_id), max_by(manifests_from, run_id)"
        ~ " from " ~ ledger ~ " where status != 'running'").rows[0] -%}
    {%- set since = previous[0] or '' -%}
    {%- set landed_lsn = sqlserver_cdc._json_map(previous[1]) -%}
    {%- set upper_batch = sqlserver_cdc._json_map(previous[2]) -%}
    {#- what landed since the previous run, per channel (Delta skips older batches' files) -#}
    {%- set arrived = [] -%}
    {%- for row in run_query("select case when landing_kind = 'cdc_metadata' then 'change_tables' else landing_kind end,"
        ~ " max(_batch_id) from " ~ raw ~ " where _batch_id > " ~ sqlserver_cdc._sql_string(since)
        ~ " and (landing_kind in ('ces', 'debezium') or (landing_kind = 'cdc_metadata' and entity = 'lsn_time_mapping')) group by 1") -%}
        {%- do arrived.append(row[0]) -%}
        {%- if row[0] != 'change_tables' and row[1] > upper_batch.get(row[0], '') -%}
            {%- do upper_batch.update({row[0]: row[1]}) -%}
        {%- endif -%}
    {%- endfor -%}
    {%- for row in run_query(sqlserver_cdc.landed_high_water_mark(raw, since, arrived)) -%}
        {%- if row[1] is not none and row[1] > landed_lsn.get(row[0], '') -%}
            {%- do landed_lsn.update({row[0]: row[1]}) -%}
        {%- endif -%}
    {%- endfor -%}
    {%- set export = sqlserver_cdc._export_cut(raw, since, previous[5] or '', sqlserver_cdc._json_map(previous[4]),
        landed_lsn.get('change_tables')) -%}
    {%- set upper = {} -%}
    {%- if upper_lsn is not none -%}
        {%- set capped = run_query('select ' ~ sqlserver_cdc.lsn_normalize(sqlserver_cdc._sql_string(upper_lsn))).rows[0][0] -%}
        {%- if capped is none -%}
            {{ exceptions.raise_compiler_error("--upper-lsn " ~ upper_lsn ~ " is not an LSN; give e.g. 0x0000002C00000300017C") }}
        {%- endif -%}
        {%- for channel in ['change_tables', 'ces', 'debezium'] -%}{%- do upper.update({channel: capped}) -%}{%- endfor -%}
    {%- else -%}
        {%- do upper.update(landed_lsn) -%}
    {%- endif -%}
    {%- if export.cut is not none and upper.get('change_tables') and export.cut < upper['change_tables'] -%}
        {%- if export.cut -%}
            {%- do upper.update({'change_tables': export.cut}) -%}
        {%- else -%}
            {%- do upper.pop('change_tables') -%}
        {%- endif -%}
    {%- endif -%}
    {%- set status = 'running' -%}
    {%- if not force and not landed and sqlserver_cdc._marts_at(upper, upper_batch) -%}
        {%- set status = 'nothing_to_do' -%}
    {%- endif -%}
    {%- set refused = [] -%}
    {%- for reason in landing.refused + stopped -%}{%- do refused.append(sqlserver_cdc._sql_string(reason)) -%}{%- endfor -%}
    {% do run_query('insert into ' ~ ledger ~ ' (run_id, started_at, ended_at, status, full_refresh, since_run_id, landed,'
        ~ ' landed_lsn, upper_lsn, upper_batch, exported_lsn, manifests_from, refused) select ' ~ sqlserver_cdc._sql_string(batch_id) ~ ', current_timestamp(), '
        ~ ('current_timestamp()' if status != 'running' else 'cast(null as timestamp)') ~ ", '" ~ status ~ "', "
        ~ (full_refresh | string | lower) ~ ', ' ~ sqlserver_cdc._sql_string(previous[3] or '') ~ ', '
        ~ sqlserver_cdc._sql_map(landed, 'bigint') ~ ', ' ~ sqlserver_cdc._sql_map(landed_lsn, 'string') ~ ', '
        ~ sqlserver_cdc._sql_map(upper, 'string') ~ ', ' ~ sqlserver_cdc._sql_map(upper_batch, 'string') ~ ', '
        ~ sqlserver_cdc._sql_map(export.exported, 'string') ~ ', ' ~ sqlserver_cdc._sql_string(export.manifests_from) ~ ', '
        ~ 'cast(array(' ~ refused | join(', ') ~ ') as array<string>)') %}
    {%- set channels = sqlserver_cdc._declared_channels() -%}
    {#- the seeds (reference tables of the data tests) need loading only once -#}
    {%- set seeds_loaded = [] -%}
    {%- for node in graph.nodes.values() if node.resource_type == 'seed' -%}
        {#- SHOW TABLES reads the metastore only (dbt-spark's get_relation describes every table of the schema) -#}
        {%- do seeds_loaded.append(run_query("show tables in " ~ node.schema ~ " like " ~ sqlserver_cdc._sql_string(node.alias)).rows | length > 0) -%}
    {%- endfor -%}
    {%- set payload = {'run_id': batch_id, 'status': status, 'landed': landed, 'upper_lsn': upper,
        'upper_batch': upper_batch, 'channels': channels, 'seeds_loaded': false not in seeds_loaded,
        'refused': landing.refused, 'waiting': landing.waiting, 'held_back': export.held_back,
        'without_manifest': export.without_manifest, 'export_gaps': export.gaps,
        'stale_snapshots': sqlserver_cdc._stale_snapshots(raw, batch_id) if landed else []} -%}
    {{ log('sqlserver_cdc.begin_run ' ~ tojson(payload), info=true) }}
{%- endmacro %}

{% macro default__begin_run(files, batch_id, raw_schema=none, upper_lsn=none, force=false, full_refresh=false, stopped=[]) -%}
    {{ exceptions.raise_compiler_error(sqlserver_cdc._not_supported('begin_run')) }}
{%- endmacro %}

{#- The snapshots landed in batch `batch_id` that will never apply (docs/landing.md "Snapshots"): at or
    below the watermark of one of their table's marts, as "<table>: ..." texts. -#}
{% macro _stale_snapshots(raw, batch_id) -%}
    {%- set stale = [] -%}
    {%- for row in run_query("select s.tracked_table, s.snapshot_lsn, max(w.watermark_lsn) from (select lower(entity) as tracked_table,"
        ~ " row_values['snapshot_lsn'] as snapshot_lsn from " ~ raw ~ " where _batch_id = " ~ sqlserver_cdc._sql_string(batch_id)
        ~ " and landing_kind = 'snapshot_manifest') as s inner join (" ~ sqlserver_cdc.mart_watermarks() ~ ") as w"
        ~ " on w.model_name in (concat(s.tracked_table, '_current'), concat(s.tracked_table, '_history'))"
        ~ " where s.snapshot_lsn <= w.watermark_lsn group by s.tracked_table, s.snapshot_lsn") -%}
        {%- do stale.append(row[0] ~ ': the snapshot at 0x' ~ row[1] ~ ' is at or below its marts\' watermark 0x' ~ row[2]
            ~ ', so it is never applied; land one taken later') -%}
    {%- endfor -%}
    {{ return(stale) }}
{%- endmacro %}

{#- The change-table cut that export manifests allow (docs/landing.md "Export manifests"):
    {exported, manifests_from, cut, held_back, without_manifest, gaps}.
    exported: per capture instance with manifests, the LSN its exports cover without a gap (the
    previous run's value, raised by the manifests landed since `since` or, while one waits beyond
    a gap, since manifests_from, the batch of the earliest such manifest). A manifest continues
    the chain when its after_lsn is at or below the LSN reached (the first one starts it).
    cut: the smallest LSN the declared change-table tables' exports reach (_table_exported; none
    when no table has manifests), and held_back the table holding the cut below `captured` (the landed
    lsn_time_mapping high-water mark): {table, capture_instance, exported_lsn, captured_lsn}.
    without_manifest: the declared instances with none (their rows follow the mapping alone). -#}
{% macro _export_cut(raw, since, manifests_from, exported, captured) -%}
    {%- set rows = run_query("select entity, row_values['after_lsn'], row_values['through_lsn'], _batch_id from " ~ raw
        ~ " where landing_kind = 'manifest' and (_batch_id > " ~ sqlserver_cdc._sql_string(since)
        ~ (" or _batch_id >= " ~ sqlserver_cdc._sql_string(manifests_from) if manifests_from else '') ~ ")"
        ~ " order by entity, coalesce(row_values['after_lsn'], ''), row_values['through_lsn']") -%}
    {%- set by_instance = {} -%}
    {%- for row in rows -%}
        {%- do by_instance.setdefault(row[0] | lower, []).append({'after': row[1], 'through': row[2], 'batch': row[3]}) -%}
    {%- endfor -%}
    {%- set exported = dict(exported) -%}
    {%- set pending = [] -%}
    {%- set gaps = [] -%}
    {%- for instance, manifests in by_instance.items() -%}
        {%- set reached = namespace(lsn=exported.get(instance)) -%}
        {#- each pass takes every manifest that continues the chain; as many passes as manifests -#}
        {%- for _ in manifests -%}
            {%- for m in manifests if m.through > (reached.lsn or '') and (reached.lsn is none or m.after is none or m.after <= reached.lsn) -%}
                {%- set reached.lsn = m.through -%}
            {%- endfor -%}
        {%- endfor -%}
        {%- do exported.update({instance: reached.lsn}) -%}
        {%- for m in manifests if m.through > reached.lsn -%}
            {%- do pending.append(m.batch) -%}
            {%- if loop.first -%}
                {%- do gaps.append(instance ~ ': exported through 0x' ~ reached.lsn ~ ', the next landed export starts after 0x' ~ m.after) -%}
            {%- endif -%}
        {%- endfor -%}
    {%- endfor -%}
    {%- set required = sqlserver_cdc._export_manifests_required() -%}
    {%- set cut = namespace(lsn=none, table=none, instance=none) -%}
    {%- set without = [] -%}
    {%- for name, table in var('cdc_tracked_tables', {}).items() | sort if table.get('channel', 'change_tables') == 'change_tables' -%}
        {%- set t = sqlserver_cdc.tracked_table(name) -%}
        {%- set reached = sqlserver_cdc._table_exported(t, exported) -%}
        {%- if reached is not none or required -%}
            {%- if cut.lsn is none or (reached or '') < cut.lsn -%}
                {%- set cut.lsn = reached or '' -%}
                {%- set cut.table = name -%}
                {%- set cut.instance = sqlserver_cdc._table_export_laggard(t, exported) -%}
            {%- endif -%}
        {%- else -%}
            {%- do without.append(t.capture_instance | lower) -%}
        {%- endif -%}
    {%- endfor -%}
    {%- set held_back = none -%}
    {%- if cut.lsn is not none and captured and cut.lsn < captured -%}
        {#- '' (required, not exported yet): no change-table mart takes anything -#}
        {%- set held_back = {'table': cut.table, 'capture_instance': cut.instance, 'exported_lsn': cut.lsn, 'captured_lsn': captured} -%}
    {%- endif -%}
    {{ return({'exported': exported, 'manifests_from': (pending | min) if pending else '', 'cut': cut.lsn,
        'held_back': held_back, 'without_manifest': without, 'gaps': gaps}) }}
{%- endmacro %}

{#- How far a change-table table's exports reach (docs/tables.md "Capture-instance changes"): the
    smallest exported LSN of its capture instances with manifests that are not declared dropped
    (while two run side by side, each holds the changes only it captures), else the largest of
    the dropped ones'; none when no instance has manifests. exported: capture instance (lower
    case) -> LSN (see _export_cut). -#}
{% macro _table_exported(t, exported) -%}
    {%- set active, dropped = [], [] -%}
    {%- for i in t.instances if exported.get(i.name | lower) is not none -%}
        {%- do (dropped if i.dropped else active).append(exported[i.name | lower]) -%}
    {%- endfor -%}
    {{ return((active | min) if active else ((dropped | max) if dropped else none)) }}
{%- endmacro %}

{#- The capture instance whose exports reach as far as table t's do (see _table_exported). -#}
{% macro _table_export_laggard(t, exported) -%}
    {%- set reached = sqlserver_cdc._table_exported(t, exported) -%}
    {%- for i in t.instances if exported.get(i.name | lower) == reached and not i.dropped -%}
        {{ return(i.name | lower) }}
    {%- endfor -%}
    {{ return(t.capture_instance | lower) }}
{%- endmacro %}

{#- var cdc_export_manifests: 'optional' (default; an instance without manifests follows the
    lsn_time_mapping alone, with a warning) or 'required' (an instance without a landed manifest
    holds the cut where its exports reach: nowhere until its first lands). -#}
{% macro _export_manifests_required() -%}
    {%- set mode = var('cdc_export_manifests', 'optional') -%}
    {%- if mode not in ('optional', 'required') -%}
        {{ exceptions.raise_compiler_error("var cdc_export_manifests must be 'optional' or 'required'; got " ~ mode) }}
    {%- endif -%}
    {{ return(mode == 'required') }}
{%- endmacro %}

{#- True when every tracked table's marts have reached their channel's upper bound (and, for
    event channels, the last landed batch): a build would change nothing. -#}
{% macro _marts_at(upper, upper_batch) -%}
    {%- set reached = {} -%}
    {%- for row in run_query(sqlserver_cdc.mart_watermarks()) -%}
        {%- do reached.update({row[0]: [row[1], row[2]]}) -%}
    {%- endfor -%}
    {%- for name, table in var('cdc_tracked_tables', {}).items() -%}
        {%- set channel = table.get('channel', 'change_tables') -%}
        {%- for mart in [name ~ '_current', name ~ '_history'] -%}
            {%- set row = reached.get(mart) -%}
            {%- if row is none or row[0] != upper.get(channel) -%}{{ return(false) }}{%- endif -%}
            {%- if channel != 'change_tables' and row[1] != upper_batch.get(channel) -%}{{ return(false) }}{%- endif -%}
        {%- endfor -%}
    {%- endfor -%}
    {{ return(true) }}
{%- endmacro %}

{#- The ledger row of the run in progress, or none (no runner run: plain dbt). -#}
{% macro running_run() -%}
    {{ return(adapter.dispatch('running_run', 'sqlserver_cdc')()) }}
{%- endmacro %}

{% macro spark__running_run() -%}
    {%- if not execute or not var('cdc_runner', false) -%}{{ return(none) }}{%- endif -%}
    {%- set rows = run_query("select run_id, since_run_id, landed_lsn['change_tables'] from " ~ sqlserver_cdc.ledger_relation()
        ~ " where status = 'running' order by run_id desc limit 1").rows -%}
    {{ return({'run_id': rows[0][0], 'since_run_id': rows[0][1], 'capture_lsn': rows[0][2]} if rows else none) }}
{%- endmacro %}

{% macro default__running_run() -%}
    {{ exceptions.raise_compiler_error(sqlserver_cdc._not_supported('running_run')) }}
{%- endmacro %}

{#- The window bound the running run recorded, as a scalar subquery (field: upper_lsn or
    upper_batch). -#}
{% macro _ledger_bound(field, channel) -%}
    (select max_by({{ field }}['{{ channel }}'], run_id) from {{ sqlserver_cdc.ledger_relation() }} where status = 'running')
{%- endmacro %}

{#- on-run-end hook, after advance_watermarks, in a runner's build (var cdc_runner): closes the
    running ledger row with its status (failed when a model or test failed or errored), the
    failed nodes, the per-table summary (run_summary) and, per declared event channel, the
    stream summary; logs `sqlserver_cdc.finish_run <json>` for the runner to print. -#}
{% macro finish_run(results) -%}
    {{ return(adapter.dispatch('finish_run', 'sqlserver_cdc')(results=results)) }}
{%- endmacro %}

{% macro spark__finish_run(results) -%}
    {%- set run = sqlserver_cdc.running_run() -%}
    {%- if run is none -%}
    select 1
    {%- else -%}
        {%- set ledger = sqlserver_cdc.ledger_relation() -%}
        {%- set failed = [] -%}
        {%- for r in results if r.status in ('error', 'fail') -%}
            {%- do failed.append(r.node.resource_type ~ ' ' ~ r.node.name ~ ': ' ~ r.status) -%}
        {%- endfor -%}
        {%- set quoted = [] -%}
        {%- for name in failed -%}{%- do quoted.append(sqlserver_cdc._sql_string(name)) -%}{%- endfor -%}
        {%- set streams = [] -%}
        {%- for channel in sqlserver_cdc._declared_channels() if channel in ('ces', 'debezium') -%}
            {%- do streams.append("select '" ~ channel ~ "' as channel, * from (" ~ sqlserver_cdc.stream_summary(channel, run.since_run_id, run.run_id) ~ ")") -%}
        {%- endfor -%}
        {%- set summary -%}
            select
                '{{ run.run_id }}' as run_id,
                (select collect_list(struct(tracked_table, cast(rows_landed as bigint) as rows_landed,
                    cast(quarantined as bigint) as quarantined, cast(changes_applied as bigint) as changes_applied,
                    lsn_reached, advanced, lag_seconds, cast(current_rows as bigint) as current_rows,
                    cast(history_versions as bigint) as history_versions))
                    from ({{ sqlserver_cdc.run_summary(run.since_run_id, run.run_id, invocation_id, run.capture_lsn) }})) as tables,
                {%- if streams %}
                (select collect_list(struct(channel, cast(lines_landed as bigint) as lines_landed,
                    cast(duplicates as bigint) as duplicates, cast(pending_messages as bigint) as pending_messages,
                    cast(tombstones as bigint) as tombstones, cast(quarantined as bigint) as quarantined,
                    cast(quarantined_total as bigint) as quarantined_total))
                    from ({{ streams | join(' union all ') }})) as streams
                {%- else %}
                cast(array() as array<struct<channel: string, lines_landed: bigint, duplicates: bigint,
                    pending_messages: bigint, tombstones: bigint, quarantined: bigint, quarantined_total: bigint>>) as streams
                {%- endif %}
        {%- endset -%}
        {% do run_query('merge into ' ~ ledger ~ ' as l using (' ~ summary ~ ') as s on l.run_id = s.run_id'
            ~ " when matched then update set l.status = '" ~ ('failed' if failed else 'succeeded') ~ "',"
            ~ ' l.ended_at = current_timestamp(), l.tables = s.tables, l.streams = s.streams,'
            ~ ' l.failed_nodes = cast(array(' ~ quoted | join(', ') ~ ') as array<string>)') %}
        {%- set row = run_query("select to_json(named_struct('status', status, 'tables', tables, 'streams', streams,"
            ~ " 'failed_nodes', failed_nodes), map('ignoreNullFields', 'false')) from " ~ ledger ~ " where run_id = '" ~ run.run_id ~ "'").rows[0][0] -%}
        {{ log('sqlserver_cdc.finish_run ' ~ row, info=true) }}
    select 1
    {%- endif -%}
{%- endmacro %}

{% macro default__finish_run(results) -%}
    {{ exceptions.raise_compiler_error(sqlserver_cdc._not_supported('finish_run')) }}
{%- endmacro %}
