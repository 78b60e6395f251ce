{#- Staging for one tracked table fed by change tables: the landed rows of its capture instance,
    typed, `__$` names renamed, operation decoded, commit time joined from lsn_time_mapping.
    Every landed row comes out once; rows that cannot be trusted carry quarantine_reason (and
    their landed record as JSON) and are left out downstream. -#}
{% macro stage_change_table(table_name) -%}
    {{ return(adapter.dispatch('stage_change_table', 'sqlserver_cdc')(table_name)) }}
{%- endmacro %}

{% macro default__stage_change_table(table_name) -%}
{%- set t = sqlserver_cdc.tracked_table(table_name) -%}
{%- set v = "row_values['%s']" -%}
with

landed_rows as (
    select * from {{ source('cdc_raw', 'landed_rows') }}
    where landing_kind = 'change_tables' and lower(entity) = '{{ t.capture_instance | lower }}'
),

lsn_time_mapping as (
    select start_lsn, tran_end_time
    from {{ ref('stg_cdc_metadata__lsn_time_mapping') }}
    where quarantine_reason is null
),

decoded as (
    select
        -- change metadata
        {{ sqlserver_cdc.lsn_normalize(v % '__$start_lsn') }} as commit_lsn,
        {{ sqlserver_cdc.lsn_normalize(v % '__$seqval') }} as change_lsn,
        try_cast({{ v % '__$command_id' }} as int) as command_id,
        {{ sqlserver_cdc.decode_operation(v % '__$operation', 'change_tables') }} as operation,
        {{ sqlserver_cdc.update_mask_normalize(v % '__$update_mask') }} as update_mask,

        -- captured columns
        {%- for c in t.columns %}
        {{ sqlserver_cdc.cast_from_text(v % (c.name | lower), c.type) }} as {{ c.name }},
        {%- endfor %}

        -- why the row cannot be used, if it cannot
        nullif(concat_ws('; ',
            {{ sqlserver_cdc.lsn_invalid_reason(v % '__$start_lsn', '__$start_lsn') }},
            {{ sqlserver_cdc.lsn_invalid_reason(v % '__$seqval', '__$seqval') }},
            case when {{ sqlserver_cdc.decode_operation(v % '__$operation', 'change_tables') }} is null
                then concat('unknown __$operation: ', coalesce({{ v % '__$operation' }}, 'NULL')) end,
            {{ sqlserver_cdc.update_mask_invalid_reason(v % '__$update_mask', '__$update_mask') }},
            case when {{ v % '__$command_id' }} is not null and try_cast({{ v % '__$command_id' }} as int) is null
                then concat('invalid __$command_id: ', {{ v % '__$command_id' }}) end,
            {%- for c in t.columns %}
            {{ sqlserver_cdc.cast_invalid_reason(v % (c.name | lower), c.type, c.name) }},
            {%- endfor %}
            {%- for k in t.key %}
            case when {{ v % (k | lower) }} is null then 'key column {{ k }} is NULL' end{{ ',' if not loop.last }}
            {%- endfor %}
        ), '') as quarantine_reason,

        -- lineage
        to_json(row_values) as landed_record,
        _source_file,
        _batch_id,
        _ingested_at
    from landed_rows
),

final as (
    select
        decoded.commit_lsn,
        decoded.change_lsn,
        decoded.command_id,
        decoded.operation,
        {{ sqlserver_cdc.operation_number('decoded.operation') }} as operation_code,
        decoded.update_mask,
        lsn_time_mapping.tran_end_time as commit_time,
        {%- for c in t.columns %}
        decoded.{{ c.name }},
        {%- endfor %}
        decoded.quarantine_reason,
        case when decoded.quarantine_reason is not null then decoded.landed_record end as landed_record,
        decoded._source_file,
        decoded._batch_id,
        decoded._ingested_at
    from decoded
    left join lsn_time_mapping
        on decoded.commit_lsn = lsn_time_mapping.start_lsn
)

select * from final
{%- endmacro %}
