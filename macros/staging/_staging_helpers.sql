{#- Private helpers shared by the staging macros of every channel. -#}

{#- Typed staging is a Delta table appended once per landing batch (docs/marts.md "Typed
    staging"), by the materialization cdc_staging: each landed record is decoded, typed and
    validated once, and later models read the typed rows, never the raw maps again. With
    unique_key the batch is merged instead of appended (rows of earlier batches that the batch
    settles are updated; incremental_predicates limit the stored rows the MERGE reads). -#}
{% macro _staged_table_config(unique_key=none, incremental_predicates=none) -%}
    {{ config(materialized='cdc_staging', unique_key=unique_key, incremental_predicates=incremental_predicates) }}
{%- endmacro %}

{#- The rows a staging model takes in: those of `relation` (default: the raw landing table)
    matching `where`, on an incremental build only those of the landing batches its window
    takes in (after the last batch it took in, up to the run's), as literals so Delta skips the
    files of other batches. A batch it holds already is left out: a run killed after the model's
    commit and before its watermark was recorded does not stage that batch twice. A full build
    takes every row. -#}
{% macro _landed_since(where, relation=none) -%}
    {%- set window = sqlserver_cdc.cdc_window() -%}
    select * from {{ relation if relation is not none else source('cdc_raw', 'landed_rows') }}
    where ({{ where }})
    {%- if not window.full %}
        and _batch_id > {{ sqlserver_cdc._sql_string(window.from_batch) }}
        {%- if window.through_batch %}
        and _batch_id <= {{ sqlserver_cdc._sql_string(window.through_batch) }}
        {%- endif %}
        and _batch_id not in (
            select distinct _batch_id from {{ this }}
            where _batch_id > {{ sqlserver_cdc._sql_string(window.from_batch) }} and _batch_id is not null
        )
    {%- endif %}
{%- endmacro %}

{#- The complete events of a shared event model (stg_ces__events, stg_debezium__events) that
    belong to tracked table t: by its declared topic (Debezium), else by source schema and table,
    case-insensitively; and by database: one of the table's (_event_from). -#}
{% macro _event_route(t) -%}
    status = 'complete'
    {%- if t.channel == 'debezium' and t.topic %}
        and topic = '{{ t.topic }}'
    {%- else %}
        and lower(source_schema) = '{{ t.source_schema | lower }}'
        and lower(source_table) = '{{ t.source_table | lower }}'
    {%- endif %}
    {%- set from = [] -%}
    {%- for db in t.databases if db.sql_name -%}{%- do from.append(sqlserver_cdc._event_from(t.channel, db)) -%}{%- endfor -%}
    {%- if from %}
        and ({{ from | join(' or ') }})
    {%- endif %}
{%- endmacro %}

{#- Whether an event of `channel` comes from database `db` (a tracked table's, see tracked_table):
    its name on SQL Server (CES eventsource.db, Debezium source.db), and, when declared, its GUID
    (the first part of a CES logicalid) or its server (Debezium's source.name, else the topic's
    prefix). Columns of the event models (source_database, logicalid, source_server). -#}
{% macro _event_from(channel, db) -%}
    (lower(source_database) = {{ sqlserver_cdc._sql_string(db.sql_name | lower) }}
    {%- if channel == 'ces' and db.guid %} and lower(split(logicalid, ':')[0]) = {{ sqlserver_cdc._sql_string(db.guid | lower) }}{% endif %}
    {%- if channel == 'debezium' and db.server %} and lower(source_server) = {{ sqlserver_cdc._sql_string(db.server | lower) }}{% endif %})
{%- endmacro %}

{#- The declared database an event of `channel` comes from (var cdc_databases): its id ('' the
    default one; what=name: its name, a tenant mart's source_database value), NULL for an event of
    no declared database; every event is the default database's when the project declares none.
    The databases that name a GUID or a server are tried first (two servers may host a database
    of one name). -#}
{% macro _event_database(channel, what='id') -%}
    {%- set estate = sqlserver_cdc._databases() -%}
    {%- if not estate -%}
    ''
    {%- else -%}
    {%- set specific, plain = [], [] -%}
    {%- for db in estate.values() | sort(attribute='name') -%}
        {%- do (specific if (channel == 'ces' and db.guid) or (channel == 'debezium' and db.server) else plain).append(db) -%}
    {%- endfor %}
    case
        {%- for db in specific + plain %}
        when {{ sqlserver_cdc._event_from(channel, db) }} then {{ sqlserver_cdc._sql_string(db[what]) }}
        {%- endfor %}
    end
    {%- endif -%}
{%- endmacro %}

{#- The first landing batch whose lines stg_ces__events may still hold as pending: a split
    message waits at most orphan_after CES landing batches (counted up to the last batch the
    model took in, its window's from_batch), so its lines lie in the last orphan_after batches
    that landed CES lines up to that batch, which the run ledger records. '' (every batch) on a
    full build or when the ledger records fewer such batches. -#}
{% macro _ces_waiting_from(window, orphan_after) -%}
    {%- if window.full or not window.from_batch or orphan_after < 1 -%}{{ return('') }}{%- endif -%}
    {%- set rows = run_query("select run_id from " ~ sqlserver_cdc.ledger_relation() ~ " where run_id <= "
        ~ sqlserver_cdc._sql_string(window.from_batch) ~ " and exists(map_keys(landed), k -> startswith(k, 'ces/'))"
        ~ " order by run_id desc limit " ~ orphan_after).rows -%}
    {{ return(rows[-1][0] if rows | length >= orphan_after else '') }}
{%- endmacro %}

{#- The declared columns cast to their Spark types from text_<column>. -#}
{% macro _typed_columns(t) -%}
    {%- for c in t.columns %}
    {{ sqlserver_cdc.cast_from_text('text_' ~ c.name, c.type) }} as {{ c.name }}{{ ',' if not loop.last }}
    {%- endfor %}
{%- endmacro %}

{#- Quarantine reasons of the declared columns (for concat_ws): a value that does not cast, a key
    column without a value. -#}
{% macro _column_reasons(t, missing_key='is NULL') -%}
    {%- for c in t.columns %}
    {{ sqlserver_cdc.cast_invalid_reason('text_' ~ c.name, c.type, c.name, typed=c.name) }},
    {%- endfor %}
    {%- for k in t.key %}
    case when text_{{ k }} is null then 'key column {{ k }} {{ missing_key }}' end{{ ',' if not loop.last }}
    {%- endfor %}
{%- endmacro %}

{#- The columns event-channel staging (CES, Debezium) ends with, after commit_lsn, change_lsn
    and command_id: operation, its number, the update mask, commit time, the typed columns, the
    _has_<column> flags, event id, quarantine reason and landing metadata. An update's mask has
    the non-key columns it carries, less those whose value equals the old one when the old row
    was sent (old, new: maps of lower-case source column names to the sent values); any other
    operation's mask has every column. -#}
{% macro _event_staging_columns(t, old, new) -%}
    {%- set keys = t.key | map('lower') | list -%}
    {%- set changed_flags, all_flags = [], [] -%}
    {%- for c in t.columns -%}
        {%- set source = sqlserver_cdc._sql_string(c.source | lower) -%}
        {%- do all_flags.append([c.ordinal, 'true']) -%}
        {%- if c.name | lower not in keys -%}
            {%- do changed_flags.append([c.ordinal, "_has_" ~ c.name ~ " and not coalesce(" ~ old ~ "[" ~ source ~ "] <=> "
                ~ new ~ "[" ~ source ~ "] and map_contains_key(" ~ old ~ ", " ~ source ~ "), false)"]) -%}
        {%- endif -%}
    {%- endfor -%}
    {%- set width = t.columns | map(attribute='ordinal') | max %}
        operation,
        operation_code,
        case when operation = 'update_after'
            then {{ sqlserver_cdc.update_mask_from_flags(changed_flags, width) }}
            else {{ sqlserver_cdc.update_mask_from_flags(all_flags, width) }}
        end as update_mask,
        commit_time,
        {%- for c in t.columns %}
        {{ c.name }},
        {%- endfor %}
        {%- for c in t.columns if c.name | lower not in keys %}
        _has_{{ c.name }},
        {%- endfor %}
        event_id,
        quarantine_reason,
        case when quarantine_reason is not null then landed_record end as landed_record,
        _source_file,
        _batch_id,
        _ingested_at
{%- endmacro %}

{#- The skeleton every channel's staging ends with, after its `texts` CTE (one text_<column> per
    declared column, `unreadable`, the landing metadata): `typed` adds the channel's decoded
    columns (`decoded`: SQL "expression as name" items) and the declared columns cast from their
    texts; `validated` adds quarantine_reason, every reason that applies joined by '; ' (the
    unreadable line, the channel's `reasons`, then the columns': a value that does not cast, a key
    column without a value, worded with `missing_key`). Ends without a comma: the caller's
    `final` CTE follows. -#}
{% macro _typed_and_validated(t, decoded=[], reasons=[], missing_key='is NULL') -%}
typed as (
    select
        *,
        {%- for item in decoded %}
        {{ item }},
        {%- endfor %}
        {{- sqlserver_cdc._typed_columns(t) }}
    from texts
),

validated as (
    select
        *,
        nullif(concat_ws('; ',
            unreadable,
            {%- for reason in reasons %}
            {{ reason }},
            {%- endfor %}
            {{- sqlserver_cdc._column_reasons(t, missing_key=missing_key) }}
        ), '') as quarantine_reason
    from typed
)
{%- endmacro %}

{#- The final CTE of an event channel's staging (CES, Debezium): the change-table staging columns
    (a tenant table's source_database first, from its events' _database_name), change_lsn and
    command_id as the channel gives them, old and new the maps of the sent row images (see
    _event_staging_columns). -#}
{% macro _event_final(t, change_lsn, command_id, old, new) -%}
final as (
    select
        {%- if t.tenant %}
        _database_name as source_database,
        {%- endif %}
        commit_lsn,
        {{ change_lsn }} as change_lsn,
        {{ command_id }} as command_id,
        {{- sqlserver_cdc._event_staging_columns(t, old, new) }}
    from validated
)
{%- endmacro %}
