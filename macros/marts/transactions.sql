{#- The net changes of a tracked table per key and committed transaction in a mart's window
    (window: see _mart_window), the query both marts start from: key columns, commit_lsn,
    operation_code (1 delete, 2 insert, 4 update, 5 snapshot: the transaction's net operation),
    update_mask (the OR of the transaction's masks, for updates), the other captured columns
    (the transaction's last values) and commit_time. Change tables: the changes above the
    window's lower LSN up to its bound, on top of the snapshot that starts the window when
    there is one (which reconciles the marts as stored). Channels whose events arrive late
    (CES, Debezium) rebuild every transaction of each key touched by newly arrived events, from
    all its events; a touched key none of whose events nets to a change any more comes as one
    marker row (commit_lsn and operation_code NULL), which the marts turn into removals. Each
    mart computes it for its own window (it reads only the window's staged rows); the history
    mart is built first, so both reconcile against the current state as it was before the
    build. -#}
{% macro _transactions(t, window) -%}
{%- set columns = t.columns | map(attribute='name') | list -%}
{%- set non_key = sqlserver_cdc._non_key_columns(t) -%}
{%- set out_columns = t.key + ['commit_lsn', 'operation_code', 'update_mask'] + non_key + ['commit_time'] -%}
{%- set recompute = sqlserver_cdc._recomputes_keys(t) -%}
with
{%- if recompute %}

touched as (
    {{ sqlserver_cdc._mart_touched(t, window) }}
),
{%- endif %}

changes as (
    {{ sqlserver_cdc._mart_changes(t, window) }}
),

{%- if t.channel == 'debezium' %}

{{ sqlserver_cdc._debezium_transactions(t, window, out_columns) }},
{%- else %}

transactions as (
    select * from {{ sqlserver_cdc.net_changes('changes', t.key + ['commit_lsn'], columns, 'all with mask',
        extra_columns=['commit_time'], max_mask_bytes=((t.columns | length) + 7) // 8) }}
),
{%- endif %}

{%- if window.snapshot %}

{{ sqlserver_cdc._snapshot_reconciled(t, window) }},
{%- endif %}

final as (
    select {{ out_columns | join(', ') }} from transactions
    {%- if window.snapshot %}
    union all
    select {{ out_columns | join(', ') }} from reconciled
    {%- endif %}
    {%- if recompute %}
    union all
    -- a touched key none of whose events nets to a change any more (an insert and its delete in
    -- one transaction, completed by a late event): the marts remove what they hold of it
    select
        {%- for c in out_columns %}
        {{ 'touched.' ~ c if c in t.key else 'null as ' ~ c }}{{ ',' if not loop.last }}
        {%- endfor %}
    from touched
    left anti join transactions
        on {{ sqlserver_cdc._key_match(t, 'touched', 'transactions') }}
    {%- endif %}
)

select * from final
{%- endmacro %}

{#- Debezium's transactions of table t (channel debezium; out_columns: _transactions' columns),
    from `changes` with the window's complete snapshots applied (docs/landing.md "Snapshots"):
    `reconciled_changes` (a key alive before a complete snapshot that it lacks is deleted at its
    LSN; a snapshot row equal to the key's state before it is dropped, _snapshot_mask the columns
    that differ) and `transactions` (the net changes per key and commit LSN; a snapshot's insert
    is operation code 5 with that mask). Two CTEs, ending without a comma. -#}
{% macro _debezium_transactions(t, window, out_columns) -%}
{%- set columns = t.columns | map(attribute='name') | list -%}
{%- set non_key = sqlserver_cdc._non_key_columns(t) -%}
{%- set change_columns = ['commit_lsn', 'change_lsn', 'command_id', 'operation_code', 'update_mask', 'commit_time']
    + t.key + non_key + ['_from_snapshot'] -%}
-- Debezium snapshots (docs/landing.md "Snapshots"): a key alive before a complete snapshot that it lacks is
-- deleted at its LSN; a snapshot row equal to the key's state before it is no change, one that
-- differs names the columns that do
reconciled_changes as (
    select
        {{ change_columns | join(', ') }},
        -- a snapshot version's changed columns: those that differ from the key's state before it
        case when _before.operation_code != 1
            then {{ sqlserver_cdc.update_mask_from_flags(sqlserver_cdc._differing_flags(t, '_before'), width=t.columns | map(attribute='ordinal') | max) }}
            else update_mask end as _snapshot_mask
    from (
        select
            *,
            lag(struct(operation_code{% for c in non_key %}, {{ c }}{% endfor %})) over (
                partition by {{ t.key | join(', ') }} order by commit_lsn, change_lsn, command_id
            ) as _before
        from (
            select {{ change_columns | join(', ') }} from changes
            {%- for s in window.complete_snapshots %}
            union all
            select
                {{ s.lsn }} as commit_lsn, '00000000000000000000' as change_lsn, 0 as command_id, 1 as operation_code,
                cast(null as binary) as update_mask, {{ s.commit_time }} as commit_time,
                {%- for k in t.key %}
                alive.{{ k }},
                {%- endfor %}
                {%- for c in non_key %}
                alive._last.{{ c }},
                {%- endfor %}
                false as _from_snapshot
            from (
                -- the delete carries the key's last values, as a deleted row's change does
                select
                    {{ t.key | join(', ') }},
                    max_by(struct(operation_code{% for c in non_key %}, {{ c }}{% endfor %}),
                        struct(commit_lsn, change_lsn, command_id)) as _last
                from changes
                where commit_lsn < {{ s.lsn }}{% if t.tenant %} and source_database = {{ sqlserver_cdc._sql_string(s.name) }}{% endif %}
                group by {{ t.key | join(', ') }}
                having _last.operation_code != 1
            ) as alive
            left anti join (
                select {{ t.key | join(', ') }} from changes where commit_lsn = {{ s.lsn }} and _from_snapshot
            ) as kept
                on {{ sqlserver_cdc._key_match(t, 'alive', 'kept') }}
            {%- endfor %}
        )
    )
    where not coalesce(_from_snapshot and _before.operation_code != 1
        {%- for c in non_key %}
        and _before.{{ c }} <=> {{ c }}
        {%- endfor %}, false)
),

transactions as (
    select
        {%- for c in out_columns %}
        {%- if c == 'operation_code' %}
        case when operation_code = 2 and _from_snapshot then 5 else operation_code end as operation_code,
        {%- elif c == 'update_mask' %}
        case when operation_code = 2 and _from_snapshot then _snapshot_mask else update_mask end as update_mask,
        {%- else %}
        {{ c }}{{ ',' if not loop.last }}
        {%- endif %}
        {%- endfor %}
    from {{ sqlserver_cdc.net_changes('reconciled_changes', t.key + ['commit_lsn'], columns, 'all with mask',
        extra_columns=['commit_time', '_from_snapshot', '_snapshot_mask'], max_mask_bytes=((t.columns | length) + 7) // 8) }}
)
{%- endmacro %}

{#- The change-table snapshot at the window's lower bound (window.snapshot) that the window's
    transactions apply on top of: `snapshot` (its rows), `known` (the current-state mart as
    stored, when the window reconciles), `snapshot_time` and `reconciled` (the versions that
    reconcile the marts with the snapshot: operation code 5 for a key whose values the marts do
    not hold, 1 for a key the marts hold alive that the snapshot lacks). CTEs ending without a
    comma. -#}
{% macro _snapshot_reconciled(t, window) -%}
{%- set at = sqlserver_cdc._at -%}
{%- set columns = t.columns | map(attribute='name') | list -%}
{%- set non_key = sqlserver_cdc._non_key_columns(t) -%}
-- the table's snapshot at the window's lower bound (docs/landing.md "Snapshots"): the changes above apply on
-- top of it; it reconciles what the marts hold
snapshot as (
    -- distinct: a snapshot landed twice (under another name) counts once
    select distinct {{ (['source_database'] if t.tenant else []) | join('') }}{{ ', ' if t.tenant }}{{ columns | join(', ') }}
    from {{ sqlserver_cdc._staging_ref(t) }}
    where quarantine_reason is null and operation = 'snapshot' and commit_lsn = {{ at(window.snapshot, 'source_database') }}
),

{%- set known = sqlserver_cdc._current_relation(t) if window.reconcile else none %}
{%- if known is not none %}

known as (
    select {{ sqlserver_cdc._stored_columns(known, t, (['source_database'] if t.tenant else []) + columns, window.evolve) }}
    from {{ known }}
    where not is_deleted
        {%- if t.tenant %}
        -- the databases whose snapshot reconciles the marts
        and source_database in ('{{ window.reconciling | join("', '") }}')
        {%- endif %}
),
{%- endif %}

snapshot_time as (
    {%- set mapped = sqlserver_cdc._database_name_of(t, 'source_database') if t.tenant else "''" %}
    select {{ mapped }} as _database, max_by(tran_end_time, start_lsn) as commit_time
    from {{ ref('stg_cdc_metadata__lsn_time_mapping') }}
    where quarantine_reason is null and {{ sqlserver_cdc._raw_database_filter(t) }}
        and start_lsn <= {{ at(window.snapshot, mapped) }}
    group by 1
),

reconciled as (
    -- a key the snapshot has with values the marts do not hold: a version at its LSN (operation
    -- code 5, snapshot), its mask the columns that differ (all for a key they do not hold)
    select
        {%- for k in t.key %}
        snapshot.{{ k }},
        {%- endfor %}
        {{ at(window.snapshot, 'snapshot.source_database') }} as commit_lsn,
        5 as operation_code,
        {{ sqlserver_cdc.update_mask_from_flags(sqlserver_cdc._snapshot_flags(t, known is not none), width=t.columns | map(attribute='ordinal') | max) }} as update_mask,
        {%- for c in non_key %}
        snapshot.{{ c }},
        {%- endfor %}
        snapshot_time.commit_time
    from snapshot
    -- left: a database without lsn_time_mapping rows (Debezium's) has no commit time here
    left join snapshot_time
        on snapshot_time._database = {{ 'snapshot.source_database' if t.tenant else "''" }}
    {%- if known is not none %}
    left join known
        on {{ sqlserver_cdc._key_match(t, 'snapshot', 'known') }}
    where known.{{ t.key[0] }} is null
        {%- for c in non_key %}
        or not (snapshot.{{ c }} <=> known.{{ c }})
        {%- endfor %}
    union all
    -- a key the marts hold alive that the snapshot does not have: deleted at its LSN, with the
    -- values the marts hold (a deleted row's change carries its last values)
    select
        {%- for k in t.key %}
        known.{{ k }},
        {%- endfor %}
        {{ at(window.snapshot, 'known.source_database') }} as commit_lsn,
        1 as operation_code,
        cast(null as binary) as update_mask,
        {%- for c in non_key %}
        known.{{ c }},
        {%- endfor %}
        snapshot_time.commit_time
    from known
    -- left: a database without lsn_time_mapping rows (Debezium's) has no commit time here
    left join snapshot_time
        on snapshot_time._database = {{ 'known.source_database' if t.tenant else "''" }}
    left anti join snapshot
        on {{ sqlserver_cdc._key_match(t, 'known', 'snapshot') }}
    {%- endif %}
)
{%- endmacro %}

{#- The complete Debezium snapshots of table t within its window (docs/landing.md "Snapshots"):
    {complete_snapshots: [{lsn, commit_time, name}] as SQL literals (name: a tenant table's
    database), touch_all}. A snapshot is complete when a row of it is marked `last` (the end of
    the whole snapshot of its database, whichever table it is in) or, for this table,
    `last_in_data_collection`, and the table has rows in it; an incremental snapshot never is.
    touch_all: one of them (its rows or its marker) landed after `lower_batch` (a tenant table's:
    its database's, by name), so every key of the table is rebuilt (keys it lacks are deleted). The markers are read from
    stg_debezium__events by a predicate on snapshot_marker, which Delta's file statistics answer
    without reading the files of ordinary changes. -#}
{% macro _debezium_complete_snapshots(t, window, lower_batch) -%}
    {#- a table of one database names its snapshots by a constant (agate reads '' as NULL) -#}
    {%- set name = sqlserver_cdc._event_database('debezium', 'name') if t.tenant else "'-'" -%}
    {%- set from = [] -%}
    {%- for db in t.databases if db.sql_name -%}{%- do from.append(sqlserver_cdc._event_from('debezium', db)) -%}{%- endfor -%}
    {%- set markers = run_query("select " ~ name ~ " as _database, commit_lsn, max(_batch_id) from " ~ ref('stg_debezium__events')
        ~ " where status = 'complete' and ((snapshot_marker = 'last'" ~ ((" and (" ~ from | join(' or ') ~ ")") if from else '')
        ~ ") or (snapshot_marker = 'last_in_data_collection' and " ~ sqlserver_cdc._event_route(t) ~ ")) and commit_lsn <= "
        ~ sqlserver_cdc._at(window.upper, name) ~ " group by 1, 2") -%}
    {%- set found = [] -%}
    {%- set touch = namespace(all=false) -%}
    {%- if markers.rows | length > 0 -%}
        {%- set landed, pairs = {}, [] -%}
        {%- for row in markers -%}
            {%- do landed.update({row[0] ~ '/' ~ row[1]: row[2]}) -%}
            {%- do pairs.append("(" ~ sqlserver_cdc._sql_string(row[0]) ~ ", " ~ sqlserver_cdc._sql_string(row[1]) ~ ")") -%}
        {%- endfor -%}
        {%- set database = 'source_database' if t.tenant else "'-'" -%}
        {%- for row in run_query("select " ~ database ~ " as _database, commit_lsn, cast(max(commit_time) as string), max(_batch_id) from "
            ~ sqlserver_cdc._staging_ref(t) ~ " where quarantine_reason is null and operation = 'snapshot' and ("
            ~ database ~ ", commit_lsn) in (" ~ pairs | join(', ') ~ ") group by 1, 2 order by 1, 2") -%}
            {%- do found.append({'lsn': "'" ~ row[1] ~ "'", 'name': row[0],
                'commit_time': "timestamp'" ~ row[2] ~ "'" if row[2] else 'cast(null as timestamp)'}) -%}
            {%- set lower = lower_batch.get(row[0], '') if lower_batch is mapping else lower_batch -%}
            {%- set touch.all = touch.all or lower is none or [row[3], landed[row[0] ~ '/' ~ row[1]]] | max > lower -%}
        {%- endfor -%}
    {%- endif -%}
    {{ return({'complete_snapshots': found, 'touch_all': touch.all}) }}
{%- endmacro %}

{#- The current-state mart of a table as stored (a snapshot, and the columns an instance does not
    capture, reconcile against it; read by name, not ref, which would make a cycle). Only asked
    for in an incremental build, where the window says it exists: no lookup. -#}
{% macro _current_relation(t) -%}
    {%- for node in graph.nodes.values() if node.resource_type == 'model'
        and node.config.meta.get('cdc_table') == t.name and node.config.meta.get('cdc_mart') == 'current_state' -%}
        {{ return(api.Relation.create(database=node.database, schema=node.schema, identifier=node.alias, type='table')) }}
    {%- endfor -%}
    {{ return(none) }}
{%- endmacro %}

{#- A select list of `columns` from a stored mart. evolve (the table's declaration changed since
    the mart was built): the mart's columns are looked up, and a column it does not have yet is
    NULL (it gains it in this build's MERGE). -#}
{% macro _stored_columns(relation, t, columns, evolve=false) -%}
    {%- if not evolve -%}
        {{ return(columns | join(', ')) }}
    {%- endif -%}
    {%- set stored = adapter.get_columns_in_relation(relation) | map(attribute='name') | map('lower') | list -%}
    {%- set types = {} -%}
    {%- do types.update({'source_database': 'string'}) -%}
    {%- for c in t.columns -%}{%- do types.update({c.name: sqlserver_cdc.spark_type(c.type)}) -%}{%- endfor -%}
    {%- for c in columns -%}
        {{ c if c | lower in stored else 'cast(null as ' ~ types[c] ~ ') as ' ~ c }}{{ ', ' if not loop.last }}
    {%- endfor -%}
{%- endmacro %}

{#- [ordinal, flag] pairs of the non-key columns whose value differs from the same field of struct
    `before` (a Debezium snapshot row against the key's state before it). -#}
{% macro _differing_flags(t, before) -%}
    {%- set flags = [] -%}
    {%- for c in t.columns if c.name not in t.key -%}
        {%- do flags.append([c.ordinal, 'not (' ~ before ~ '.' ~ c.name ~ ' <=> ' ~ c.name ~ ')']) -%}
    {%- endfor -%}
    {{ return(flags) }}
{%- endmacro %}

{#- [ordinal, flag] pairs for a snapshot version's update mask: every column for a key the marts
    do not hold, else the columns whose value differs (see transactions). -#}
{% macro _snapshot_flags(t, known) -%}
    {%- set flags = [] -%}
    {%- for c in t.columns -%}
        {%- if known and c.name not in t.key -%}
            {%- do flags.append([c.ordinal, 'known.' ~ t.key[0] ~ ' is null or not (snapshot.' ~ c.name ~ ' <=> known.' ~ c.name ~ ')']) -%}
        {%- elif known -%}
            {%- do flags.append([c.ordinal, 'known.' ~ t.key[0] ~ ' is null']) -%}
        {%- else -%}
            {%- do flags.append([c.ordinal, 'true']) -%}
        {%- endif -%}
    {%- endfor -%}
    {{ return(flags) }}
{%- endmacro %}
