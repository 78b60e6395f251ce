-- cdc.change_tables: one row per capture instance of each database (NULL: the default one), from
-- its latest landed export. start_lsn is the low end of the validity interval
-- (sys.fn_cdc_get_min_lsn), which cleanup moves forward. An incremental Delta table: each landing
-- batch's rows are decoded once and merged by database and capture instance (a later export
-- replaces the stored row; a quarantined row never matches).
{{ sqlserver_cdc._staged_table_config(
    unique_key=['source_database', 'capture_instance'],
    incremental_predicates=['DBT_INTERNAL_SOURCE.quarantine_reason is null and DBT_INTERNAL_DEST.quarantine_reason is null']
) }}

with

landed_rows as (
    {{ sqlserver_cdc._landed_since("landing_kind = 'cdc_metadata' and entity = 'change_tables'") }}
),

decoded as (
    select
        -- ids
        source_database,
        row_values['capture_instance'] as capture_instance,
        try_cast(row_values['object_id'] as bigint) as object_id,
        try_cast(row_values['source_object_id'] as bigint) as source_object_id,
        -- lsns
        {{ sqlserver_cdc.lsn_normalize("row_values['start_lsn']") }} as start_lsn,
        -- strings
        row_values['index_name'] as index_name,
        -- booleans
        try_cast(row_values['supports_net_changes'] as boolean) as supports_net_changes,
        -- timestamps
        {{ sqlserver_cdc.cast_from_text("row_values['create_date']", 'datetime') }} as create_date,
        -- quarantine
        nullif(concat_ws(
            '; ',
            case when row_values['capture_instance'] is null then 'missing capture_instance' end,
            {{ sqlserver_cdc.lsn_invalid_reason("row_values['start_lsn']", 'start_lsn') }}
        ), '') as quarantine_reason,
        to_json(row_values) as landed_record,
        _source_file,
        _batch_id,
        _ingested_at
    from landed_rows
),

ranked as (
    select
        *,
        row_number() over (
            partition by source_database, lower(capture_instance), quarantine_reason is null
            order by _ingested_at desc, start_lsn desc
        ) as _rank
    from decoded
),

final as (
    select
        source_database,
        capture_instance,
        object_id,
        source_object_id,
        start_lsn,
        index_name,
        supports_net_changes,
        create_date,
        quarantine_reason,
        case when quarantine_reason is not null then landed_record end as landed_record,
        _source_file,
        _batch_id,
        _ingested_at
    from ranked
    where _rank = 1 or quarantine_reason is not null
)

select * from final
