-- Change Event Streaming: every landed CloudEvent line, de-duplicated by source + id, split
-- messages reassembled by logicalid in segment order (whatever the index base), and the data
-- document's envelope parsed. One row per complete event (status 'complete', _batch_id = the
-- batch that completed it), plus one row per landed line that is a duplicate, waits for missing
-- segments ('pending') or cannot be trusted ('quarantined', with the reason and the raw line).
-- sqlfluff reads struct field access (doc.eventsource.tbl) as a table-qualified reference:
-- noqa: disable=RF03
-- Built only when a tracked table declares channel ces (nothing to route events to otherwise).
{{ config(enabled=sqlserver_cdc.channel_declared('ces')) }}
{%- set orphan_after = var('cdc_ces_orphan_after_batches', 3) | int %}
{%- set data_schema = 'struct<eventsource: struct<db: string, `schema`: string, tbl: string,'
    ~ ' cols: array<struct<name: string, type: string, index: int>>,'
    ~ ' pkkey: array<struct<columnname: string, value: string>>,'
    ~ ' transaction: struct<commitlsn: string, beginlsn: string, sequencenumber: string, committime: string>>,'
    ~ ' eventrow: struct<old: string, current: string>>' %}

with

landed_rows as (
    select * from {{ source('cdc_raw', 'landed_rows') }}
    where landing_kind = 'ces'
),

-- landing batches that brought CES lines, newest first (an incomplete split message waits
-- var cdc_ces_orphan_after_batches of them for its missing segments)
batches as (
    select
        _batch_id,
        dense_rank() over (order by _batch_id desc) - 1 as batches_since
    from (select distinct _batch_id from landed_rows) as landed_batches
),

envelope as (
    select
        row_values is null as unreadable,
        row_values['source'] as event_source,
        row_values['id'] as id,
        row_values['type'] as event_type,
        row_values['logicalid'] as logicalid,
        row_values['operation'] as operation_text,
        row_values['time'] as event_time_text,
        -- current form: segmentindex / finalsegment; early preview form: splitindex / splittotalcnt
        coalesce(row_values['segmentindex'], row_values['splitindex']) as segment_index_text,
        lower(trim(row_values['finalsegment'])) as final_segment_text,
        row_values['splittotalcnt'] as split_total_text,
        row_values['data'] as data_text,
        coalesce(raw_text, to_json(row_values)) as landed_record,
        _source_file,
        _batch_id,
        _ingested_at
    from landed_rows
),

checked as (
    select
        *,
        coalesce(try_cast(segment_index_text as int), 0) as segment_index,
        case
            when final_segment_text is not null then final_segment_text = 'true'
            else coalesce(try_cast(split_total_text as int), 0) <= 1
        end as is_final,
        final_segment_text is null as early_form,
        try_cast(split_total_text as int) as split_total,
        case
            when unreadable then 'not a JSON object'
            else nullif(concat_ws(
                '; ',
                case
                    when event_type is null or not startswith(event_type, 'com.microsoft.SQL.CES.DML.')
                        then concat('not a CES DML CloudEvent (type ', coalesce(event_type, 'missing'), ')')
                end,
                case when event_source is null or id is null then 'missing source or id' end,
                case
                    when not coalesce(logicalid rlike '^[^:]+:[0-9A-Fa-f]{20}:[0-9]{1,20}$', false)
                        then concat('invalid logicalid: ', coalesce(logicalid, 'missing'))
                end,
                case
                    when {{ sqlserver_cdc.decode_operation('operation_text', 'ces') }} is null
                        then concat('unknown operation: ', coalesce(operation_text, 'missing'))
                end,
                case
                    when segment_index_text is not null and try_cast(segment_index_text as int) is null
                        then concat('invalid segment index: ', segment_index_text)
                end,
                case
                    when final_segment_text not in ('true', 'false')
                        then concat('invalid finalsegment: ', final_segment_text)
                end,
                case
                    when split_total_text is not null and try_cast(split_total_text as int) is null
                        then concat('invalid splittotalcnt: ', split_total_text)
                end,
                case when data_text is null then 'missing data' end
            ), '')
        end as line_problem
    from envelope
),

-- at-least-once delivery: the first landed copy of source + id wins; a segment delivered again
-- under another id is the same segment of the same logicalid
copies as (
    select
        *,
        case when event_source is null or id is null then 1 else row_number() over (
            partition by event_source, id order by _batch_id, _source_file
        ) end as id_copy
    from checked
),

lines as (
    select
        *,
        case when line_problem is not null or id_copy > 1 then 1 else row_number() over (
            partition by event_source, logicalid, segment_index, line_problem is null and id_copy = 1
            order by _batch_id, _source_file
        ) end as segment_copy
    from copies
),

segments as (
    select * from lines
    where line_problem is null and id_copy = 1 and segment_copy = 1
),

messages as (
    select
        event_source,
        logicalid,
        count(*) as segment_count,
        min(segment_index) as first_index,
        max(segment_index) as last_index,
        count_if(is_final) as finals,
        min(segment_index) filter (where is_final) as final_index,
        bool_and(early_form) as early_form,
        max(split_total) as split_total,
        -- the segments' data in index order
        concat_ws(
            '', transform(array_sort(collect_list(struct(segment_index, data_text))), piece -> piece.data_text)
        ) as data_text,
        sort_array(collect_list(segment_index)) as segment_indexes,
        min_by(id, segment_index) as event_id,
        min_by(operation_text, segment_index) as operation_text,
        min_by(event_time_text, segment_index) as event_time_text,
        case when count(*) = 1 then min(landed_record) end as single_line,
        max_by(_source_file, _batch_id) as _source_file,
        max(_batch_id) as completed_batch,
        min(_batch_id) as first_batch,
        max(_ingested_at) as _ingested_at
    from segments
    group by event_source, logicalid
),

assembled as (
    select
        messages.*,
        -- a contiguous run of segment indexes ending at the final segment (0- or 1-based)
        case
            when messages.early_form and coalesce(messages.split_total, 0) <= 1 then messages.segment_count = 1
            when messages.early_form
                then (
                    messages.segment_count = messages.split_total
                    and messages.last_index - messages.first_index + 1 = messages.segment_count
                )
            else (
                messages.finals = 1 and messages.final_index = messages.last_index
                and messages.last_index - messages.first_index + 1 = messages.segment_count
            )
        end as indexes_complete,
        (messages.finals > 1 or messages.final_index < messages.last_index) as conflicting,
        from_json(messages.data_text, '{{ data_schema }}') as doc,
        batches.batches_since
    from messages
    inner join batches
        on messages.first_batch = batches._batch_id
),

parsed as (
    select
        *,
        doc.eventsource is not null and doc.eventrow is not null as readable,
        {{ sqlserver_cdc.lsn_normalize(
            "coalesce(doc.eventsource.transaction.commitlsn, element_at(split(logicalid, ':'), -2))", 'string') }}
            as commit_lsn,
        coalesce(
            try_cast(doc.eventsource.transaction.sequencenumber as decimal(20, 0)),
            try_cast(element_at(split(logicalid, ':'), -1) as decimal(20, 0))
        ) as sequence_number
    from assembled
),

outcomes as (
    select
        *,
        case
            when conflicting
                then concat(
                    'conflicting segments of logicalid ', logicalid, ': indexes ', array_join(segment_indexes, ','),
                    ', final segment at ', coalesce(cast(final_index as string), 'none')
                )
            when indexes_complete and readable
                then nullif(concat_ws(
                    '; ',
                    case when commit_lsn is null then concat(
                        'no valid commit LSN in transaction.commitlsn or logicalid ',
                        logicalid
                    ) end,
                    case when sequence_number is null then 'no valid sequence number in transaction or logicalid' end,
                    case
                        when doc.eventsource.tbl is null or doc.eventsource.schema is null
                            then 'data.eventsource names no schema and table'
                    end
                ), '')
            when indexes_complete and first_index = 0
                then concat(
                    'data is not a CES data document (eventsource and eventrow)',
                    case when segment_count > 1 then concat(' after joining ', segment_count, ' segments') end
                )
            when batches_since >= {{ orphan_after }} then concat(
                'orphan segments: logicalid ', logicalid, ' has segment(s) ', array_join(segment_indexes, ','),
                case when finals > 0 then concat(' (final ', final_index, ')') else ' and no final segment' end,
                ' and was not completed into a readable data document within {{ orphan_after }} landing batches'
            )
        end as message_problem,
        case
            when conflicting then 'quarantined'
            when indexes_complete and readable then 'complete'
            when indexes_complete and first_index = 0 then 'quarantined'
            when batches_since >= {{ orphan_after }} then 'quarantined'
            else 'pending'
        end as message_status
    from parsed
),

events as (
    select
        event_id,
        event_source,
        logicalid,
        commit_lsn,
        sequence_number,
        {{ sqlserver_cdc.decode_operation('operation_text', 'ces') }} as operation,  -- noqa: RF04
        doc.eventsource.db as source_database,
        doc.eventsource.schema as source_schema,
        doc.eventsource.tbl as source_table,
        doc.eventsource.cols as source_columns,
        map_from_entries(transform(doc.eventsource.pkkey, k -> struct(lower(k.columnname), k.value))) as key_values,
        doc.eventrow.old as old_image,
        doc.eventrow.current as current_image,
        -- committime carries a Z even on servers not set to UTC: it is read as the server's
        -- wall clock, like lsn_time_mapping.tran_end_time; the early form has only `time`
        {{ sqlserver_cdc.cast_from_text(
            "regexp_replace(coalesce(doc.eventsource.transaction.committime, event_time_text), '(Z|[+-][0-9]{2}:[0-9]{2})$', '')",
            'datetime2') }} as commit_time,
        segment_count,
        'complete' as status,
        message_problem as quarantine_reason,
        coalesce(single_line, data_text) as landed_record,
        _source_file,
        completed_batch as _batch_id,
        _ingested_at
    from outcomes
    where message_status = 'complete' and message_problem is null
),

line_outcomes as (
    select
        lines.id as event_id,
        lines.event_source,
        lines.logicalid,
        lines.segment_index,
        case
            when lines.line_problem is not null then 'quarantined'
            when lines.id_copy > 1 or lines.segment_copy > 1 then 'duplicate'
            when outcomes.message_status = 'complete' and outcomes.message_problem is not null then 'quarantined'
            else outcomes.message_status
        end as status,
        coalesce(
            lines.line_problem, case when lines.id_copy = 1 and lines.segment_copy = 1 then outcomes.message_problem end
        )
            as quarantine_reason,
        lines.landed_record,
        lines._source_file,
        lines._batch_id,
        lines._ingested_at
    from lines
    left join outcomes
        on lines.event_source = outcomes.event_source and lines.logicalid = outcomes.logicalid
),

final as (
    select * from events
    union all
    select
        event_id,
        event_source,
        logicalid,
        cast(null as string) as commit_lsn,
        cast(null as decimal(20, 0)) as sequence_number,
        cast(null as string) as operation,  -- noqa: RF04
        cast(null as string) as source_database,
        cast(null as string) as source_schema,
        cast(null as string) as source_table,
        cast(null as array<struct<name: string, type: string, index: int>>) as source_columns,
        cast(null as map<string, string>) as key_values,  -- noqa: LT01
        cast(null as string) as old_image,
        cast(null as string) as current_image,
        cast(null as timestamp) as commit_time,
        cast(null as int) as segment_count,
        status,
        quarantine_reason,
        landed_record,
        _source_file,
        _batch_id,
        _ingested_at
    from line_outcomes
    where status != 'complete'
)

select * from final
