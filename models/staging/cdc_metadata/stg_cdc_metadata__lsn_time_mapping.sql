-- cdc.lsn_time_mapping: commit LSN to commit time, per database (each has its own LSNs: NULL is
-- the default database's, docs/tables.md "Several databases"). Exports overlap, so each commit
-- LSN of a database is kept once (latest landed); rows with a bad LSN or time are kept with their
-- quarantine reason. An incremental Delta table: each landing batch's rows are decoded once and
-- merged by database and commit LSN (a later export of a commit LSN replaces the stored row; a
-- quarantined row never matches).
{{ sqlserver_cdc._staged_table_config(
    unique_key=['source_database', 'start_lsn'],
    incremental_predicates=['DBT_INTERNAL_SOURCE.quarantine_reason is null and DBT_INTERNAL_DEST.quarantine_reason is null']
) }}

with

landed_rows as (
    {{ sqlserver_cdc._landed_since("landing_kind = 'cdc_metadata' and entity = 'lsn_time_mapping'") }}
),

decoded as (
    select
        -- ids
        source_database,
        -- lsns
        {{ sqlserver_cdc.lsn_normalize("row_values['start_lsn']") }} as start_lsn,
        {{ sqlserver_cdc.lsn_normalize("row_values['tran_begin_lsn']") }} as tran_begin_lsn,
        -- strings
        row_values['tran_id'] as tran_id,
        -- timestamps
        {{ sqlserver_cdc.cast_from_text("row_values['tran_begin_time']", 'datetime') }} as local_begin_time,
        {{ sqlserver_cdc.cast_from_text("row_values['tran_end_time']", 'datetime') }} as local_end_time,
        -- quarantine
        nullif(concat_ws(
            '; ',
            {{ sqlserver_cdc.lsn_invalid_reason("row_values['start_lsn']", 'start_lsn') }},
            {{ sqlserver_cdc.lsn_invalid_reason("row_values['tran_begin_lsn']", 'tran_begin_lsn', required=false) }},
            {{ sqlserver_cdc.cast_invalid_reason("row_values['tran_end_time']", 'datetime', 'tran_end_time') }},
            case when row_values['tran_end_time'] is null then 'missing tran_end_time' end
        ), '') as quarantine_reason,
        to_json(row_values) as landed_record,
        _source_file,
        _batch_id,
        _ingested_at
    from landed_rows
),

-- the server's wall clock as UTC (var cdc_source_time_zone, or the database's time_zone)
timed as (
    {{ sqlserver_cdc._source_commit_times('decoded', 'local_begin_time', 'local_end_time', 'start_lsn',
        database="coalesce(source_database, '')") }}
),

ranked as (
    select
        *,
        row_number() over (
            partition by source_database, start_lsn, quarantine_reason is null
            order by _ingested_at desc, _source_file desc
        ) as _rank
    from timed
),

final as (
    select
        source_database,
        start_lsn,
        tran_begin_lsn,
        tran_id,
        tran_begin_time,
        tran_end_time,
        quarantine_reason,
        case when quarantine_reason is not null then landed_record end as landed_record,
        _source_file,
        _batch_id,
        _ingested_at
    from ranked
    where _rank = 1 or quarantine_reason is not null
)

select * from final
