{#- The run ledger (docs/operations.md "The run ledger"): one row per runner run in <target
    schema>.cdc_runs (var cdc_ledger_table), a Delta table. finish_run writes a run's row once, at
    its end, with the plan the run applied (runner/run/plan.py) and the outcome; begin_run reads the
    previous row, which the next plan continues from. status: succeeded, failed (a model or test
    failed, or a table stopped at a gap: see failed_nodes), nothing_to_do (nothing landed and
    every mart at its bound: no build). A killed run leaves no row: the next run takes in what it
    landed. Rows of earlier releases may also say running or abandoned. -#}
{% macro ledger_relation() -%}
    {{ return(api.Relation.create(
        database=none,
        schema=target.schema,
        identifier=var('cdc_ledger_table', 'cdc_runs'),
        type='table')) }}
{%- endmacro %}

{#- The ledger's columns and types, the one place they are written (the table's DDL, the columns
    added since its first release, the INSERT of a run's row). A column added in a later release
    goes at the end: the first _ledger_first_release() columns are the first release's. -#}
{% macro _ledger_columns() -%}
    {%- set table_row = 'array<struct<tracked_table: string, rows_landed: bigint, quarantined: bigint, changes_applied: bigint,'
        ~ ' lsn_reached: string, advanced: boolean, lag_seconds: bigint, current_rows: bigint, history_versions: bigint,'
        ~ ' source_database: string>>' -%}
    {%- set stream_row = 'array<struct<channel: string, lines_landed: bigint, duplicates: bigint, pending_messages: bigint,'
        ~ ' tombstones: bigint, quarantined: bigint, quarantined_total: bigint>>' -%}
    {{ return([
        ['run_id', 'string'], ['started_at', 'timestamp'], ['ended_at', 'timestamp'], ['status', 'string'],
        ['full_refresh', 'boolean'], ['since_run_id', 'string'], ['landed', 'map<string, bigint>'],
        ['landed_lsn', 'map<string, string>'], ['upper_lsn', 'map<string, string>'], ['upper_batch', 'map<string, string>'],
        ['tables', table_row], ['streams', stream_row], ['failed_nodes', 'array<string>'],
        ['exported_lsn', 'map<string, string>'], ['manifests_from', 'string'], ['refused', 'array<string>'],
        ['landed_through', 'map<string, struct<lsn: string, batch: string>>'], ['plan', 'string'],
        ['retention_minutes', 'bigint'], ['headroom_seconds', 'map<string, bigint>'], ['retentions', 'map<string, bigint>']]) }}
{%- endmacro %}

{% macro _ledger_first_release() -%}
    {{ return(13) }}
{%- endmacro %}

{#- The ledger's DDL; a new ledger records the state layout `layout` (runner/run/layout.py). -#}
{% macro _ledger_ddl(relation, layout=none) -%}
    {%- set columns = [] -%}
    {%- for c in sqlserver_cdc._ledger_columns() -%}{%- do columns.append(c[0] ~ ' ' ~ c[1]) -%}{%- endfor -%}
    create table if not exists {{ relation }} ({{ columns | join(', ') }}) using delta
    {%- if layout is not none %} tblproperties ('{{ sqlserver_cdc._layout_property() }}' = '{{ layout | int }}'){% endif %}
{%- endmacro %}

{#- The ledger's table property that records the state layout (runner/run/layout.py PROPERTY). -#}
{% macro _layout_property() -%}
    {{ return('sqlserver_cdc.state_layout') }}
{%- endmacro %}

{#- The ledger's sqlserver_cdc.* table properties (the state layout; the maintenance's
    sqlserver_cdc.maintained_at and sqlserver_cdc.raw_held_from, docs/operations.md
    "Maintenance"), by name; none when there is no ledger. -#}
{% macro _ledger_properties(relation) -%}
    {%- if not run_query("show tables in " ~ relation.schema ~ " like '" ~ relation.identifier ~ "'").rows -%}
        {{ return(none) }}
    {%- endif -%}
    {%- set found = {} -%}
    {%- for row in run_query('show tblproperties ' ~ relation) if row[0].startswith('sqlserver_cdc.') -%}
        {%- do found.update({row[0]: row[1]}) -%}
    {%- endfor -%}
    {{ return(found) }}
{%- endmacro %}

{#- Layout 1 to 2 (runner/run/layout.py MIGRATIONS; docs/tables.md "Several databases"): the raw
    table's source_database (NULL, the default database, for every row landed before), the run
    ledger's per-table source_database, the metadata staging tables' source_database, and the
    Debezium events' source_server; each added where missing, so a migration killed halfway is
    completed by the next run. Nothing is rewritten: the rows of a one-database warehouse are the
    default database's as they are. -#}
{% macro migrate_to_layout_2() -%}
    {{ return(adapter.dispatch('migrate_to_layout_2', 'sqlserver_cdc')()) }}
{%- endmacro %}

{% macro default__migrate_to_layout_2() -%}
    {{ exceptions.raise_compiler_error(sqlserver_cdc._not_supported('migrate_to_layout_2')) }}
{%- endmacro %}

{% macro spark__migrate_to_layout_2() -%}
    {%- set raw = var('cdc_raw_schema', target.schema ~ '_raw') ~ '.landed_rows' -%}
    {%- set additions = [(raw, 'source_database', 'source_database string'),
        (sqlserver_cdc.ledger_relation() | string, 'tables.element.source_database', 'tables.element.source_database string')] -%}
    {%- for model in ['stg_cdc_metadata__lsn_time_mapping', 'stg_cdc_metadata__change_tables', 'stg_cdc_metadata__captured_columns'] -%}
        {%- do additions.append((model, 'source_database', 'source_database string')) -%}
    {%- endfor -%}
    {%- do additions.append(('stg_debezium__events', 'source_server', 'source_server string')) -%}
    {%- for relation, column, ddl in additions -%}
        {#- a staging model by its default relation: a channel's events model may be disabled now and enabled later -#}
        {%- set name = (target.schema ~ '.' ~ relation) if relation.startswith('stg_') else relation -%}
        {%- set parts = name.split('.') -%}
        {%- if run_query("show tables in " ~ parts[0] ~ " like '" ~ parts[1] ~ "'").rows -%}
            {%- set present = sqlserver_cdc._column_paths(name) -%}
            {%- if column | lower not in present -%}
                {% do run_query('alter table ' ~ name ~ ' add columns (' ~ ddl ~ ')') %}
            {%- endif -%}
        {%- endif -%}
    {%- endfor -%}
{%- endmacro %}

{#- A table's columns and its struct fields within arrays, as lower-case paths
    (tables.element.source_database), from its schema. -#}
{% macro _column_paths(relation) -%}
    {%- set paths = [] -%}
    {%- for row in run_query('describe table ' ~ relation) -%}
        {%- if not row[0] or row[0].startswith('#') -%}{%- break -%}{%- endif -%}
        {%- do paths.append(row[0] | lower) -%}
        {%- set kind = row[1] | lower -%}
        {%- if kind.startswith('array<struct<') -%}
            {%- for field in modules.re.findall('(?:^|[<,])\\s*([a-z_][a-z0-9_]*)\\s*:', kind[13:]) -%}
                {%- do paths.append((row[0] | lower) ~ '.element.' ~ field) -%}
            {%- endfor -%}
        {%- endif -%}
    {%- endfor -%}
    {{ return(paths) }}
{%- endmacro %}

{#- Records the state layout `layout` on the ledger (after the runner migrated the warehouse to it). -#}
{% macro record_layout(layout) -%}
    {{ return(adapter.dispatch('record_layout', 'sqlserver_cdc')(layout)) }}
{%- endmacro %}

{% macro default__record_layout(layout) -%}
    {{ exceptions.raise_compiler_error(sqlserver_cdc._not_supported('record_layout')) }}
{%- endmacro %}

{% macro spark__record_layout(layout) -%}
    {% do run_query('alter table ' ~ sqlserver_cdc.ledger_relation() ~ " set tblproperties ('"
        ~ sqlserver_cdc._layout_property() ~ "' = '" ~ layout | int ~ "')") %}
{%- endmacro %}

{#- Creates the ledger if missing and adds the columns an earlier release's ledger lacks. -#}
{% macro _ensure_ledger(relation, layout=none) -%}
    {% do run_query(sqlserver_cdc._ledger_ddl(relation, layout)) %}
    {%- set present = [] -%}
    {%- for row in run_query('describe table ' ~ relation) -%}
        {%- if not row[0] or row[0].startswith('#') -%}{%- break -%}{%- endif -%}
        {%- do present.append(row[0] | lower) -%}
    {%- endfor -%}
    {%- set missing = [] -%}
    {%- for c in sqlserver_cdc._ledger_columns()[sqlserver_cdc._ledger_first_release():] if c[0] not in present -%}
        {%- do missing.append(c[0] ~ ' ' ~ c[1]) -%}
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

{#- A literal of `value` (none: NULL) as `value_type`. -#}
{% macro _sql_value(value, value_type) -%}
    {%- if value is none -%}
    cast(null as {{ value_type }})
    {%- elif value_type == 'string' -%}
    {{ sqlserver_cdc._sql_string(value) }}
    {%- else -%}
    cast({{ value }} as {{ value_type }})
    {%- endif -%}
{%- endmacro %}

{#- Used by the runner (dbt run-operation), the first of a run's dbt invocations: creates what a
    run writes to when missing (the raw schema and table, the ledger, the watermark table; a
    ledger of an earlier release gets its added columns) and reports, as `sqlserver_cdc.open_run
    {"last_batch": ...}`, the largest batch id recorded or landed: the ledger's largest run id, or
    a batch landed after it (a killed run's). The runner's batch id continues after it
    (runner/run/plan.py batch_id). Reads the raw table's batches after the last recorded run only.
    Also reports which of `files` (the landing folder's, relative to it) landed, and with what
    size and time, and whether the raw table keeps landed-file records (_landed_files); the first
    run's id and, from the ledger's properties, when a maintenance pass last completed and from
    which batch on the raw retention keeps landed rows (docs/operations.md "Maintenance"). Reports
    first the state layout the ledger records (`layout`: a new ledger records `layout`, the
    runner's; none: no layout recorded) and, when it is newer than `layout`, only that: a
    warehouse of a newer release is not written to (runner/run/layout.py refuses it). -#}
{% macro open_run(raw_schema=none, files=[], layout=none) -%}
    {{ return(adapter.dispatch('open_run', 'sqlserver_cdc')(raw_schema=raw_schema, files=files, layout=layout)) }}
{%- endmacro %}

{% macro default__open_run(raw_schema=none, files=[], layout=none) -%}
    {{ exceptions.raise_compiler_error(sqlserver_cdc._not_supported('open_run')) }}
{%- endmacro %}

{% macro spark__open_run(raw_schema=none, files=[], layout=none) -%}
    {%- set raw_schema = raw_schema or var('cdc_raw_schema', target.schema ~ '_raw') -%}
    {%- set raw = raw_schema ~ '.landed_rows' -%}
    {%- set ledger = sqlserver_cdc.ledger_relation() -%}
    {% do run_query('create schema if not exists ' ~ ledger.schema) %}
    {%- set properties = sqlserver_cdc._ledger_properties(ledger) -%}
    {%- set found = layout if properties is none else (properties.get(sqlserver_cdc._layout_property()) or none) -%}
    {%- if found is not none and layout is not none and (found | string).isdigit() and found | int > layout | int -%}
        {{ log('sqlserver_cdc.open_run ' ~ tojson({'layout': found, 'ledger': ledger | string}), info=true) }}
        {{ return('') }}
    {%- endif -%}
    {% do sqlserver_cdc._ensure_ledger(ledger, layout) %}
    {% do sqlserver_cdc._ensure_watermarks() %}
    {% do run_query('create schema if not exists ' ~ raw_schema) %}
    {% do run_query(sqlserver_cdc._raw_table_ddl(raw)) %}
    {%- set runs = run_query("select coalesce(max(run_id), ''), min(run_id) from " ~ ledger).rows[0] -%}
    {%- set recorded = runs[0] -%}
    {%- set landed = run_query("select coalesce(max(_batch_id), '') from " ~ raw ~ " where _batch_id > "
        ~ sqlserver_cdc._sql_string(recorded)).rows[0][0] -%}
    {%- set report = sqlserver_cdc._landed_files(raw, files) -%}
    {%- do report.update({'last_batch': [recorded, landed] | max, 'layout': found, 'ledger': ledger | string,
        'first_run': runs[1], 'maintained_at': (properties or {}).get('sqlserver_cdc.maintained_at'),
        'raw_held_from': (properties or {}).get('sqlserver_cdc.raw_held_from')}) -%}
    {{ log('sqlserver_cdc.open_run ' ~ tojson(report), info=true) }}
{%- endmacro %}
