{#- Used by the runner (dbt run-operation) after the build, its last dbt invocation: counts what
    the run did, records the watermarks runner/run/plan.py's `advance` decided and writes the run's
    ledger row, once; logs `sqlserver_cdc.finish_run <json>` ({tables, streams}) for the runner
    to print. Four statements (and one per event channel the run staged): the counts of the
    tables the run staged or applied (the others keep the counts of the previous row), their lags
    and retention headrooms, the watermark table rewritten with one row per model and database,
    the ledger row.
    run: the ledger row's fields (see _ledger_ddl) but tables and streams; tables: per tracked
    table and database it reads {name, channel, database_id (its id, '' the default one),
    source_database (its name in a project of several databases, else none), lsn_reached,
    advanced, current_rows, history_versions (the previous row's), capture_lsn (the database's
    capture high-water mark: the lag's reference), retention_minutes (its cleanup job's
    retention: the headroom's reference)}; streams: per
    declared event channel {channel, counted (its events model built), quarantined_total (the
    previous row's)}; watermarks: the models whose watermark moved, {model, database (none: the
    model's own, or the default database's part of a mart), lsn, batch, declaration}; counts: what
    to count, grouped per tracked table (runner/run/cli.py count_groups, see _run_counts). -#}
{% macro finish_run(run, tables=[], streams=[], watermarks=[], counts=[]) -%}
    {{ return(adapter.dispatch('finish_run', 'sqlserver_cdc')(run=run, tables=tables, streams=streams, watermarks=watermarks,
        counts=counts)) }}
{%- endmacro %}

{% macro spark__finish_run(run, tables=[], streams=[], watermarks=[], counts=[]) -%}
    {%- set counted = sqlserver_cdc._run_counts(run, counts) -%}
    {%- set times = sqlserver_cdc._lags_and_headrooms(tables) -%}
    {%- set lags, headrooms = times.lags, times.headrooms -%}
    {%- set summary, headroom_by_key = [], {} -%}
    {%- for t in tables -%}
        {%- set key = sqlserver_cdc._dbkey(t.database_id, t.name) -%}
        {%- set c = counted.get(key, {}) -%}
        {%- do summary.append({'tracked_table': t.name, 'source_database': t.source_database, 'database_id': t.database_id,
            'rows_landed': c.get('rows_landed', 0), 'quarantined': c.get('quarantined', 0),
            'changes_applied': c.get('changes_applied', 0), 'lsn_reached': t.lsn_reached, 'advanced': t.advanced,
            'lag_seconds': lags.get(key), 'headroom_seconds': headrooms.get(key),
            'current_rows': c.get('current_rows', t.current_rows or 0),
            'history_versions': c.get('history_versions', t.history_versions or 0)}) -%}
        {%- if headrooms.get(key) is not none -%}{%- do headroom_by_key.update({key: headrooms[key]}) -%}{%- endif -%}
    {%- endfor -%}
    {%- set stream_rows = [] -%}
    {%- for s in streams -%}
        {%- if s.counted -%}
            {%- set row = run_query(sqlserver_cdc.stream_summary(s.channel, run.since_run_id, run.run_id)).rows[0] -%}
            {%- do stream_rows.append({'channel': s.channel, 'lines_landed': row[0] | int, 'duplicates': row[1] | int,
                'pending_messages': row[2] | int, 'tombstones': row[3] | int, 'quarantined': row[4] | int,
                'quarantined_total': row[5] | int}) -%}
        {%- else -%}
            {%- do stream_rows.append({'channel': s.channel, 'lines_landed': 0, 'duplicates': 0, 'pending_messages': 0,
                'tombstones': 0, 'quarantined': 0, 'quarantined_total': s.quarantined_total or 0}) -%}
        {%- endif -%}
    {%- endfor -%}
    {%- if watermarks -%}
        {% do run_query(sqlserver_cdc._rewrite_watermarks(watermarks, run.run_id)) %}
    {%- endif -%}
    {%- set run = dict(run) -%}
    {%- do run.update({'headroom_seconds': headroom_by_key}) -%}
    {%- set ledger_rows = [] -%}
    {%- for row in summary -%}
        {%- set kept = dict(row) -%}{%- do kept.pop('database_id') -%}{%- do ledger_rows.append(kept) -%}
    {%- endfor -%}
    {% do run_query(sqlserver_cdc._ledger_insert(run, ledger_rows, stream_rows)) %}
    {{ log('sqlserver_cdc.finish_run ' ~ tojson({'tables': summary, 'streams': stream_rows}), info=true) }}
{%- endmacro %}

{% macro default__finish_run(run, tables=[], streams=[], watermarks=[], counts=[]) -%}
    {{ exceptions.raise_compiler_error(sqlserver_cdc._not_supported('finish_run')) }}
{%- endmacro %}

{#- One query counting, for the tables the run staged or applied, per database: rows landed and
    quarantined in the batches it took in (after since_run_id, up to run_id: a batch a killed run
    landed counts in the run that stages it), changes applied (change tables: trusted change rows
    between the current-state mart's watermark before and after the run, update-before rows left
    out; event channels: the trusted events of the batches it took in up to the LSN reached) and
    both marts' rows (a tenant table's: those of the database). `counts` are the runner's groups
    (runner/run/cli.py count_groups: which rows count, and the staging read's literal bounds): each
    table's staging and marts are read once whatever the number of its databases, a tenant table's
    grouped by source_database, each database's bounds joined from literal rows (a scalar subquery
    per database and count made a query of hundreds of scans of the same tables). Keyed
    dbkey(database, table). -#}
{% macro _run_counts(run, counts) -%}
    {%- set s = sqlserver_cdc._sql_string -%}
    {%- set batches = "_batch_id > " ~ s(run.since_run_id or '') ~ " and _batch_id <= " ~ s(run.run_id) -%}
    {%- set selects = [] -%}
    {%- for group in counts -%}
        {%- set staging = sqlserver_cdc._model_relation(group.staging) -%}
        {%- set db = "coalesce(source_database, '')" if group.tenant else "''" -%}
        {%- set rows = [] -%}
        {%- for r in group.rows -%}
            {%- do rows.append("(" ~ s(r.key) ~ ", " ~ s(r.db) ~ ", " ~ ('true' if r.staged else 'false') ~ ", "
                ~ ('true' if r.applied else 'false') ~ ", " ~ ('true' if r.marts else 'false') ~ ", " ~ s(r.lower_lsn) ~ ", "
                ~ s(r.lower_batch) ~ ", " ~ s(r.lsn_reached) ~ ", " ~ s(r.batch_reached) ~ ")") -%}
        {%- endfor -%}
        {%- set bounds = "(values " ~ rows | join(', ') ~ ") as b (b_key, b_db, b_staged, b_applied, b_marts, b_lower_lsn,"
            ~ " b_lower_batch, b_lsn_reached, b_batch_reached)" -%}
        {%- set read = [] -%}
        {%- if group.read_batches -%}{%- do read.append('(' ~ batches ~ ')') -%}{%- endif -%}
        {%- if group.read_above is not none -%}
            {%- do read.append(('commit_lsn > ' if group.channel == 'change_tables' else '_batch_id > ') ~ s(group.read_above)) -%}
        {%- endif -%}
        {%- if group.channel == 'change_tables' -%}
            {%- set applied = "b.b_applied and commit_lsn > b.b_lower_lsn and commit_lsn <= b.b_lsn_reached"
                ~ " and quarantine_reason is null and operation != 'update_before'" -%}
        {%- else -%}
            {#- events arrive out of order: those this run took in, whatever their LSN -#}
            {%- set applied = "b.b_applied and _batch_id > b.b_lower_batch and _batch_id <= b.b_batch_reached"
                ~ " and commit_lsn <= b.b_lsn_reached and quarantine_reason is null" -%}
        {%- endif -%}
        {%- set query -%}
            select b_key,
                {% if read -%}
                coalesce(staged.rows_landed, 0), coalesce(staged.quarantined, 0), coalesce(staged.changes_applied, 0),
                {%- else -%}
                cast(0 as bigint), cast(0 as bigint), cast(0 as bigint),
                {%- endif %}
                {% if group.marts -%}
                case when b_marts then coalesce(current_rows.n, 0) end, case when b_marts then coalesce(history_rows.n, 0) end
                {%- else -%}
                cast(null as bigint), cast(null as bigint)
                {%- endif %}
            from {{ bounds }}
            {%- if read %}
            left join (
                select b.b_key as staged_key, count_if(b.b_staged and {{ batches }}) as rows_landed,
                    count_if(b.b_staged and {{ batches }} and quarantine_reason is not null) as quarantined,
                    count_if({{ applied }}) as changes_applied
                from (select * from {{ staging }} where {{ read | join(' or ') }}) as staged_rows
                join {{ bounds }} on {{ db }} = b.b_db
                group by b.b_key
            ) as staged on staged.staged_key = b_key
            {%- endif %}
            {%- if group.marts %}
            {%- for mart, alias in [('_current', 'current_rows'), ('_history', 'history_rows')] %}
            left join (
                select {{ db }} as mart_db, count(*) as n from {{ sqlserver_cdc._model_relation(group.name ~ mart) }}
                {{- ' group by 1' if group.tenant }}
            ) as {{ alias }} on {{ alias }}.mart_db = b_db
            {%- endfor %}
            {%- endif %}
        {%- endset -%}
        {%- do selects.append(query) -%}
    {%- endfor -%}
    {%- set counted = {} -%}
    {%- if selects -%}
        {%- for row in run_query(selects | join('\nunion all\n')) -%}
            {%- set c = {'rows_landed': row[1] | int, 'quarantined': row[2] | int, 'changes_applied': row[3] | int} -%}
            {%- if row[4] is not none -%}{%- do c.update({'current_rows': row[4] | int, 'history_versions': row[5] | int}) -%}{%- endif -%}
            {%- do counted.update({row[0]: c}) -%}
        {%- endfor -%}
    {%- endif -%}
    {{ return(counted) }}
{%- endmacro %}

{#- Per change-table table and database (keyed dbkey(database, table)), from one query over the
    staged lsn_time_mapping: its lag (seconds from the commit time of the LSN its current-state
    mart reached there to that of the database's capture high-water mark, capture_lsn) and, when
    the database's cleanup retention_minutes is known, its retention headroom (docs/operations.md
    "Retention headroom": the commit time of the first landed mapping row of the database above
    the LSN it reached, a transaction of the database that may or may not change the table, so a
    lower bound, plus the retention, less now; none when no landed transaction is above it). The
    query reads the rows of the databases concerned at those LSNs and, with a retention, above the
    smallest (Delta skips the files below). Returns {lags, headrooms}. -#}
{% macro _lags_and_headrooms(tables) -%}
    {%- set s = sqlserver_cdc._sql_string -%}
    {%- set marks, lsns, found = [], [], {'lags': {}, 'headrooms': {}} -%}
    {%- for t in tables if t.channel == 'change_tables' and t.lsn_reached and (t.capture_lsn or t.retention_minutes is not none) -%}
        {%- do marks.append("(" ~ s(sqlserver_cdc._dbkey(t.database_id, t.name)) ~ ", " ~ s(t.database_id) ~ ", " ~ s(t.lsn_reached)
            ~ ", " ~ (s(t.capture_lsn) if t.capture_lsn else 'cast(null as string)') ~ ", "
            ~ ('cast(' ~ t.retention_minutes | int ~ ' as bigint)' if t.retention_minutes is not none else 'cast(null as bigint)') ~ ")") -%}
        {%- do lsns.append(s(t.lsn_reached)) -%}
        {%- if t.capture_lsn -%}{%- do lsns.append(s(t.capture_lsn)) -%}{%- endif -%}
    {%- endfor -%}
    {%- if not marks or not sqlserver_cdc._relation_exists('stg_cdc_metadata__lsn_time_mapping') -%}
        {{ return(found) }}
    {%- endif -%}
    {%- set query -%}
        select marks.name,
            max(case when mapping.start_lsn = marks.lsn then unix_timestamp(mapping.tran_end_time) end),
            max(case when mapping.start_lsn = marks.capture then unix_timestamp(mapping.tran_end_time) end),
            min_by(unix_timestamp(mapping.tran_end_time), mapping.start_lsn) filter (where mapping.start_lsn > marks.lsn),
            unix_timestamp(),
            max(marks.retention)
        from (values {{ marks | join(', ') }}) as marks (name, db, lsn, capture, retention)
        join (
            select coalesce(source_database, '') as db, start_lsn, tran_end_time
            from {{ sqlserver_cdc._model_relation('stg_cdc_metadata__lsn_time_mapping') }}
            where quarantine_reason is null and start_lsn >= {{ lsns | min }}
        ) as mapping
            on mapping.db = marks.db and (mapping.start_lsn = marks.lsn or mapping.start_lsn = marks.capture
                or (marks.retention is not null and mapping.start_lsn > marks.lsn))
        group by marks.name
    {%- endset -%}
    {%- for row in run_query(query) -%}
        {%- if row[1] is not none and row[2] is not none -%}
            {%- do found.lags.update({row[0]: (row[2] - row[1]) | int}) -%}
        {%- endif -%}
        {%- if row[5] is not none and row[3] is not none -%}
            {%- do found.headrooms.update({row[0]: (row[3] + (row[5] | int) * 60 - row[4]) | int}) -%}
        {%- endif -%}
    {%- endfor -%}
    {{ return(found) }}
{%- endmacro %}

{#- Whether a model's relation exists (SHOW TABLES reads the metastore only). -#}
{% macro _relation_exists(name) -%}
    {%- set node = graph.nodes.values() | selectattr('resource_type', 'equalto', 'model')
        | selectattr('name', 'equalto', name) | first -%}
    {%- if not execute or node is not defined or node is none -%}
        {{ return(false) }}
    {%- endif -%}
    {{ return(run_query("show tables in " ~ node.schema ~ " like '" ~ node.alias ~ "'").rows | length > 0) }}
{%- endmacro %}

{#- The watermark table rewritten with one row per model and database (one file: reading it stays cheap
    however many runs there were): the latest row of each model, with `watermarks` (the models
    this run moved) replacing theirs whatever the clock says (recorded_at may step back). The new rows are one JSON literal (a statement of many
    literal rows costs Spark seconds to parse). -#}
{% macro _rewrite_watermarks(watermarks, run_id) -%}
    {%- set relation = sqlserver_cdc.watermark_relation() -%}
    {%- set rows = [] -%}
    {%- for w in watermarks -%}
        {%- do rows.append({'model_name': w.model, 'source_database': w.database or none, 'watermark_lsn': w.lsn,
            'watermark_batch': w.batch, 'declaration': w.declaration}) -%}
    {%- endfor -%}
    insert overwrite table {{ relation }}
    select model_name, watermark_lsn, invocation_id, recorded_at, watermark_batch, declaration, source_database
    from (
        select *, row_number() over (partition by model_name, source_database order by _new desc, recorded_at desc) as _rank
        from (
            select model_name, watermark_lsn, invocation_id, recorded_at, watermark_batch, declaration, source_database, 0 as _new
            from {{ relation }}
            union all
            select model_name, watermark_lsn, {{ sqlserver_cdc._sql_string(run_id) }}, current_timestamp(), watermark_batch,
                declaration, source_database, 1
            from (select inline(from_json({{ sqlserver_cdc._sql_string(tojson(rows)) }},
                'array<struct<model_name: string, source_database: string, watermark_lsn: string, watermark_batch: string, declaration: string>>')))
        )
    )
    where _rank = 1
{%- endmacro %}

{#- The ledger row of a run (see finish_run), as one INSERT of one JSON literal: every column of
    _ledger_columns, started_at given as text, ended_at the time of the insert. -#}
{% macro _ledger_insert(run, summary, streams) -%}
    {%- set row = dict(run) -%}
    {%- do row.update({'tables': summary, 'streams': streams}) -%}
    {%- set names, selected, fields = [], [], [] -%}
    {%- for c in sqlserver_cdc._ledger_columns() -%}
        {%- do names.append(c[0]) -%}
        {%- if c[0] == 'ended_at' -%}
            {%- do selected.append('current_timestamp()') -%}
        {%- elif c[0] == 'started_at' -%}
            {%- do selected.append('cast(r.started_at as timestamp)') -%}
            {%- do fields.append('started_at: string') -%}
        {%- else -%}
            {%- do selected.append('r.' ~ c[0]) -%}
            {%- do fields.append(c[0] ~ ': ' ~ c[1]) -%}
        {%- endif -%}
    {%- endfor -%}
    insert into {{ sqlserver_cdc.ledger_relation() }} ({{ names | join(', ') }})
    select {{ selected | join(', ') }}
    from (select from_json({{ sqlserver_cdc._sql_string(tojson(row)) }}, 'struct<{{ fields | join(', ') }}>') as r)
{%- endmacro %}

{#- Used by finish_run for each declared event channel (ces, debezium): lines landed in the
    batches this run took in (after since_batch, up to run_batch), how many of them were
    duplicates (CES: redelivered events and segments; Debezium: replayed events), split messages
    still waiting for segments (CES), tombstones (Debezium), and lines quarantined (in those
    batches, and in all: an incomplete CES message becomes an orphan batches after landing). -#}
{% macro stream_summary(channel, since_batch, run_batch) -%}
    {{ return(adapter.dispatch('stream_summary', 'sqlserver_cdc')(channel=channel, since_batch=since_batch, run_batch=run_batch)) }}
{%- endmacro %}

{% macro spark__stream_summary(channel, since_batch, run_batch) -%}
    {%- if channel not in ('ces', 'debezium') -%}
        {{ exceptions.raise_compiler_error("stream_summary: channel must be ces or debezium; got '" ~ channel ~ "'") }}
    {%- endif %}
    {%- set batches = "_batch_id > '" ~ since_batch ~ "' and _batch_id <= '" ~ run_batch ~ "'" %}
    select
        (select count(*) from {{ sqlserver_cdc._raw_landed_rows() }}
            where landing_kind = '{{ channel }}' and {{ batches }}) as lines_landed,
        count_if({{ batches }} and status = 'duplicate') as duplicates,
        {%- if channel == 'ces' %}
        count(distinct case when status = 'pending' then logicalid end) as pending_messages,
        0 as tombstones,
        {%- else %}
        0 as pending_messages,
        count_if({{ batches }} and status = 'tombstone') as tombstones,
        {%- endif %}
        count_if({{ batches }} and status = 'quarantined') as quarantined,
        count_if(status = 'quarantined') as quarantined_total
    from {{ sqlserver_cdc._model_relation('stg_' ~ channel ~ '__events') }}
{%- endmacro %}

{% macro default__stream_summary(channel, since_batch, run_batch) -%}
    {{ exceptions.raise_compiler_error(sqlserver_cdc._not_supported('stream_summary')) }}
{%- endmacro %}

{#- The raw landing table by name (source cdc_raw.landed_rows), usable in operations and hooks,
    where source() is not. -#}
{% macro _raw_landed_rows() -%}
    {{ var('cdc_raw_schema', target.schema ~ '_raw') }}.landed_rows
{%- endmacro %}
