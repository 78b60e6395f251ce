{#- Used by the runner after a build: one row per tracked table with the rows landed and
    quarantined in this batch, the changes applied by this run (change tables: between the
    current-state mart's previous and new watermark; CES: the events this run took in), the LSN
    reached and (change tables) how far its commit time lags the capture high-water mark
    (seconds), and the size of both marts. -#}
{% macro run_summary(batch_id, run_id) -%}
    {%- set mapping = ref('stg_cdc_metadata__lsn_time_mapping') -%}
    {%- set watermarks = sqlserver_cdc.watermark_relation() -%}
    {%- for name, table in var('cdc_tracked_tables', {}).items() %}
    select
        '{{ name }}' as tracked_table,
        landed.rows_landed,
        landed.quarantined,
        applied.changes_applied,
        w.reached_lsn as lsn_reached,
        w.after_lsn is not null as advanced,
        {%- if table.channel == 'change_tables' %}
        cast(unix_timestamp(hwm.commit_time) - unix_timestamp(reached.tran_end_time) as bigint) as lag_seconds,
        {%- else %}
        cast(null as bigint) as lag_seconds,
        {%- endif %}
        (select count(*) from {{ ref(name ~ '_current') }}) as current_rows,
        (select count(*) from {{ ref(name ~ '_history') }}) as history_versions
    from (
        select
            before_lsn,
            after_lsn,
            coalesce(after_lsn, nullif(before_lsn, '')) as reached_lsn
        from ({{ sqlserver_cdc._summary_watermarks(watermarks, name, run_id) }})
    ) as w
    cross join (
        select max(tran_end_time) as commit_time from {{ mapping }} where quarantine_reason is null
    ) as hwm
    -- the batch's rows only: Spark prunes the raw files by _batch_id before decoding
    cross join (
        select count(*) as rows_landed, count_if(quarantine_reason is not null) as quarantined
        from {{ ref('stg_' ~ table.channel ~ '__' ~ name) }}
        where _batch_id = '{{ batch_id }}'
    ) as landed
    cross join (
        select count(*) as changes_applied
        from {{ ref('stg_' ~ table.channel ~ '__' ~ name) }} as s
        cross join ({{ sqlserver_cdc._summary_watermarks(watermarks, name, run_id) }}) as bounds
        {%- if table.channel == 'change_tables' %}
        where s.commit_lsn > bounds.before_lsn and s.commit_lsn <= bounds.after_lsn
            and s.quarantine_reason is null and s.operation != 'update_before'
        {%- else %}
        -- events arrive out of order: those this run took in, whatever their LSN
        where s._batch_id > bounds.before_batch and s._batch_id <= bounds.after_batch
            and s.commit_lsn <= bounds.after_lsn and s.quarantine_reason is null
        {%- endif %}
    ) as applied
    left join {{ mapping }} as reached
        on reached.start_lsn = w.reached_lsn and reached.quarantine_reason is null
    {{ 'union all' if not loop.last }}
    {%- endfor %}
{%- endmacro %}

{#- The current-state mart's watermark before this run and the one this run recorded (NULL if it
    did not advance). -#}
{% macro _summary_watermarks(watermarks, name, run_id) -%}
    select
        coalesce(max_by(watermark_lsn, recorded_at) filter (where invocation_id != '{{ run_id }}'), '') as before_lsn,
        max_by(watermark_lsn, recorded_at) filter (where invocation_id = '{{ run_id }}') as after_lsn,
        coalesce(max_by(watermark_batch, recorded_at) filter (where invocation_id != '{{ run_id }}'), '') as before_batch,
        max_by(watermark_batch, recorded_at) filter (where invocation_id = '{{ run_id }}') as after_batch
    from {{ watermarks }}
    where model_name = '{{ name }}_current'
{%- endmacro %}

{#- Used by the runner after a build when an event channel (ces, debezium) has tables or landed
    lines: lines landed in this batch, how many of them were duplicates (CES: redelivered
    events and segments; Debezium: replayed events), split messages still waiting for segments
    (CES), tombstones (Debezium), and lines quarantined (in this batch, and in all: an incomplete
    CES message becomes an orphan batches after landing). -#}
{% macro stream_summary(channel, batch_id) -%}
    {%- if channel not in ('ces', 'debezium') -%}
        {{ exceptions.raise_compiler_error("stream_summary: channel must be ces or debezium; got '" ~ channel ~ "'") }}
    {%- endif %}
    select
        (select count(*) from {{ source('cdc_raw', 'landed_rows') }}
            where landing_kind = '{{ channel }}' and _batch_id = '{{ batch_id }}') as lines_landed,
        count_if(_batch_id = '{{ batch_id }}' and status = 'duplicate') as duplicates,
        {%- if channel == 'ces' %}
        count(distinct case when status = 'pending' then logicalid end) as pending_messages,
        0 as tombstones,
        {%- else %}
        0 as pending_messages,
        count_if(_batch_id = '{{ batch_id }}' and status = 'tombstone') as tombstones,
        {%- endif %}
        count_if(_batch_id = '{{ batch_id }}' and status = 'quarantined') as quarantined,
        count_if(status = 'quarantined') as quarantined_total
    from {{ ref('stg_' ~ channel ~ '__events') }}
{%- endmacro %}
