{#- Private helpers shared by the staging macros of every channel. -#}

{#- Typed staging is an incremental Delta table appended once per landing batch (docs/marts.md "Typed
    staging"): each landed record is decoded, typed and validated once, and later models read
    the typed rows, never the raw maps again. In a runner's build each commit of the table
    records the run's batch id in its commit metadata (a pre-hook sets the session's Delta
    commit metadata to the same value for every model of the run, so models built at once on
    several threads agree; the on-run-end hook clears it), so the next run finds the last batch
    it took in without reading the table. With unique_key the batch is
    merged instead of appended (rows of earlier batches that the batch settles are updated;
    incremental_predicates limit the stored rows the MERGE reads). -#}
{% macro _staged_table_config(unique_key=none, incremental_predicates=none) -%}
    {%- if unique_key is none %}
    {{ config(materialized='incremental', incremental_strategy='append', file_format='delta',
        on_schema_change='append_new_columns',
        pre_hook="{{ sqlserver_cdc._staged_through_hook() }}") }}
    {%- else %}
    {{ config(materialized='incremental', incremental_strategy='merge', file_format='delta',
        unique_key=unique_key, incremental_predicates=incremental_predicates, on_schema_change='append_new_columns',
        pre_hook="{{ sqlserver_cdc._staged_through_hook() }}") }}
    {%- endif %}
{%- endmacro %}

{% macro _staged_through_hook(reset=false) -%}
    {%- set run = sqlserver_cdc.running_run() -%}
    {%- if run is none -%}
    select 1
    {%- elif reset -%}
    reset spark.databricks.delta.commitInfo.userMetadata
    {%- else -%}
    set spark.databricks.delta.commitInfo.userMetadata=sqlserver_cdc staged through {{ run.run_id }}
    {%- endif -%}
{%- endmacro %}

{#- The rows a staging table takes in: those of `relation` (default: the raw landing table)
    matching `where`, on an incremental run only those of landing batches after the last batch
    the table took in. That batch is read from the table's last commit (its metadata, see
    _staged_table_config; else the largest _batch_id staged) and applied as a literal, so Delta
    skips the files of earlier batches by their _batch_id statistics; a run killed after
    landing is taken in by the next one. A first or full-refresh run takes every row. -#}
{% macro _landed_since_last_batch(where, relation=none) -%}
    select * from {{ relation if relation is not none else source('cdc_raw', 'landed_rows') }}
    where ({{ where }})
    {%- if execute and is_incremental() %}
        {%- set last = sqlserver_cdc._last_staged_batch(this) %}
        {%- if last is not none %}
        and _batch_id > {{ sqlserver_cdc._sql_string(last) }}
        {%- endif %}
    {%- endif %}
{%- endmacro %}

{% macro _last_staged_batch(relation) -%}
    {%- set prefix = 'sqlserver_cdc staged through ' -%}
    {%- set history = run_query('describe history ' ~ relation ~ ' limit 1') -%}
    {%- set metadata = history.rows[0]['userMetadata'] if history.rows else none -%}
    {%- if metadata and metadata.startswith(prefix) -%}
        {{ return(metadata[prefix | length:]) }}
    {%- endif -%}
    {{ return(run_query('select max(_batch_id) from ' ~ relation).columns[0].values()[0]) }}
{%- endmacro %}

{#- The complete events of a shared event model (stg_ces__events, stg_debezium__events) that
    belong to tracked table t: by its declared topic (Debezium), else by source schema and table
    (and database when declared), case-insensitively. -#}
{% macro _event_route(t) -%}
    status = 'complete'
    {%- if t.channel == 'debezium' and t.topic %}
        and topic = '{{ t.topic }}'
    {%- else %}
        and lower(source_schema) = '{{ t.source_schema | lower }}'
        and lower(source_table) = '{{ t.source_table | lower }}'
        {%- if t.source_database %}
        and lower(source_database) = '{{ t.source_database | lower }}'
        {%- endif %}
    {%- endif %}
{%- endmacro %}

{#- The first landing batch whose lines stg_ces__events (relation) may still hold as pending: a
    split message waits at most orphan_after CES landing batches (counted up to the last batch
    staged), so its lines lie in the last orphan_after batches that landed CES lines up to that
    batch, which the run ledger records. '' (every batch) outside a runner's build or when the
    ledger records fewer such batches. -#}
{% macro _ces_waiting_from(relation, orphan_after) -%}
    {%- set last = sqlserver_cdc._last_staged_batch(relation) if sqlserver_cdc.running_run() is not none else none -%}
    {%- if last is none or orphan_after < 1 -%}{{ return('') }}{%- endif -%}
    {%- set rows = run_query("select run_id from " ~ sqlserver_cdc.ledger_relation() ~ " where run_id <= "
        ~ sqlserver_cdc._sql_string(last) ~ " and exists(map_keys(landed), k -> startswith(k, 'ces/'))"
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
    was sent (old, new: maps of lower-case column names to the sent values); any other
    operation's mask has every column. -#}
{% macro _event_staging_columns(t, old, new) -%}
    {%- set keys = t.key | map('lower') | list -%}
    {%- set changed_flags, all_flags = [], [] -%}
    {%- for c in t.columns -%}
        {%- set name = c.name | lower -%}
        {%- do all_flags.append([c.ordinal, 'true']) -%}
        {%- if name not in keys -%}
            {%- do changed_flags.append([c.ordinal, "_has_" ~ c.name ~ " and not coalesce(" ~ old ~ "['" ~ name ~ "'] <=> "
                ~ new ~ "['" ~ name ~ "'] and map_contains_key(" ~ old ~ ", '" ~ name ~ "'), false)"]) -%}
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

{#- The final CTE of an event channel's staging (CES, Debezium): the change-table staging columns,
    change_lsn and command_id as the channel gives them, old and new the maps of the sent row
    images (see _event_staging_columns). -#}
{% macro _event_final(t, change_lsn, command_id, old, new) -%}
final as (
    select
        commit_lsn,
        {{ change_lsn }} as change_lsn,
        {{ command_id }} as command_id,
        {{- sqlserver_cdc._event_staging_columns(t, old, new) }}
    from validated
)
{%- endmacro %}
