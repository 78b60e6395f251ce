-- cdc.captured_columns: the captured columns of each capture instance of each database (NULL: the
-- default one) with their ordinals (the update-mask bit positions). Exports carry the change
-- table's object_id; the capture instance comes from the row itself when the export added it,
-- else from cdc.change_tables of the same database. An incremental Delta table: each landing
-- batch's rows are decoded once and merged by database, capture instance and column (a later
-- export replaces the stored row; a quarantined row never matches).
{{ sqlserver_cdc._staged_table_config(
    unique_key=['source_database', 'capture_instance', 'column_name'],
    incremental_predicates=['DBT_INTERNAL_SOURCE.quarantine_reason is null and DBT_INTERNAL_DEST.quarantine_reason is null']
) }}

with

landed_rows as (
    {{ sqlserver_cdc._landed_since("landing_kind = 'cdc_metadata' and entity = 'captured_columns'") }}
),

change_tables as (
    select
        source_database,
        object_id,
        capture_instance
    from {{ ref('stg_cdc_metadata__change_tables') }}
    where quarantine_reason is null
),

decoded as (
    select
        -- ids
        source_database,
        row_values['capture_instance'] as capture_instance,
        try_cast(row_values['object_id'] as bigint) as object_id,
        try_cast(row_values['column_id'] as int) as column_id,
        -- strings
        row_values['column_name'] as column_name,
        row_values['column_type'] as column_type,
        -- numerics
        try_cast(row_values['column_ordinal'] as int) as column_ordinal,
        -- booleans
        try_cast(row_values['is_computed'] as boolean) as is_computed,
        _source_file,
        _batch_id,
        _ingested_at
    from landed_rows
),

resolved as (
    select
        decoded.source_database,
        coalesce(decoded.capture_instance, change_tables.capture_instance) as capture_instance,
        decoded.column_name,
        decoded.column_type,
        decoded.column_ordinal,
        decoded.column_id,
        decoded.is_computed,
        decoded._batch_id,
        decoded._ingested_at,
        case
            when coalesce(decoded.capture_instance, change_tables.capture_instance) is null
                then 'unknown capture instance (no capture_instance column and no matching object_id)'
            when decoded.column_name is null then 'missing column_name'
            when decoded.column_ordinal is null then 'missing or invalid column_ordinal'
        end as quarantine_reason
    from decoded
    left join change_tables
        on decoded.object_id = change_tables.object_id and decoded.source_database <=> change_tables.source_database
),

-- each capture instance's column from its latest landed export
ranked as (
    select
        *,
        row_number() over (
            partition by source_database, capture_instance, column_name, quarantine_reason is null
            order by _batch_id desc, _ingested_at desc
        ) as _rank
    from resolved
),

final as (
    select distinct
        source_database,
        capture_instance,
        column_name,
        column_type,
        column_ordinal,
        column_id,
        is_computed,
        _batch_id,
        quarantine_reason
    from ranked
    where _rank = 1 or quarantine_reason is not null
)

select * from final
