{#- Change Event Streaming's events (stg_ces__events): the landed CloudEvent lines `new_lines` (a
    query over the raw table) de-duplicated by source + id, split messages reassembled by logicalid
    in segment order (whatever the index base), and the data document's envelope parsed; one row
    per complete event (status 'complete'), plus one per landed line: a segment of a complete
    event ('assembled'), a duplicate ('duplicate'), a segment waiting for the rest of its message
    ('pending') or a line that cannot be trusted ('quarantined', with the reason and the raw line).
    `prior`, on an incremental run, is the staged table: its pending lines are read again (and an
    orphan's segments when more of its message lands; lines and settled messages looked up where
    `staged_lsns` holds, pending ones from batch `waiting_from` on); a message waits
    `orphan_after` landing batches for its missing segments. The model stg_ces__events computes
    those literals and calls this. -#}
{% macro ces_events(new_lines, prior=none, staged_lsns='false', waiting_from='', orphan_after=3) -%}
    {{ return(adapter.dispatch('ces_events', 'sqlserver_cdc')(new_lines=new_lines, prior=prior, staged_lsns=staged_lsns,
        waiting_from=waiting_from, orphan_after=orphan_after)) }}
{%- endmacro %}

{% macro spark__ces_events(new_lines, prior=none, staged_lsns='false', waiting_from='', orphan_after=3) -%}
{%- set incremental = prior is not none %}

with

{{ sqlserver_cdc._ces_landed_rows(new_lines, prior, staged_lsns, waiting_from) }},

{%- if incremental %}

{{ sqlserver_cdc._ces_staged_lookups(prior, staged_lsns) }},
{%- endif %}

{{ sqlserver_cdc._ces_checked_lines() }},

{{ sqlserver_cdc._ces_segments(incremental) }},

{{ sqlserver_cdc._ces_messages(orphan_after) }},

{{ sqlserver_cdc._ces_outcomes(orphan_after) }},

{{ sqlserver_cdc._ces_final() }}

select * from final
{%- endmacro %}

{% macro default__ces_events(new_lines, prior=none, staged_lsns='false', waiting_from='', orphan_after=3) -%}
    {{ exceptions.raise_compiler_error(sqlserver_cdc._not_supported('ces_events')) }}
{%- endmacro %}

{#- A CES logicalid: <database guid>:<commit LSN, 20 hex digits>:<sequence number>. -#}
{% macro _ces_logicalid_pattern() -%}
    {{ return('^[^:]+:[0-9A-Fa-f]{20}:[0-9]{1,20}$') }}
{%- endmacro %}

{#- The first step: `landed_rows`, the lines of `new_lines` (a query over the raw table) and, when
    `prior` (the staged table) is given, its lines still waiting for the rest of their message and
    an orphan's segments when more of its message lands (see ces_events for `staged_lsns` and
    `waiting_from`), each with a row_key and `waiting`; then `batches`, the landing batches that
    brought CES lines, newest first (batches_since). Two CTEs, ending without a comma. -#}
{% macro _ces_landed_rows(new_lines, prior, staged_lsns, waiting_from) -%}
{%- set incremental = prior is not none -%}
-- the lines of the landing batches after the last one staged, and the lines staged earlier
-- that still wait for the rest of their message (read again from their landed record)
landed_rows as (
    select
        row_values,
        raw_text,
        _source_file,
        _batch_id,
        _ingested_at,
        concat_ws('/', 'line', _batch_id, _source_file, cast(row_number() over (
            partition by _batch_id, _source_file order by raw_text
        ) as string)) as row_key,
        false as waiting
    from ({{ new_lines }}) as landed_since_last_batch
    {%- if incremental %}
    union all
    select
        from_json(landed_record, 'map<string, string>') as row_values,
        landed_record as raw_text,
        _source_file,
        _batch_id,
        _ingested_at,
        row_key,
        true as waiting
    from {{ prior }}
    where (status = 'pending' and _batch_id >= '{{ waiting_from }}')
        -- an orphan's segments, when more of its message lands: it may complete after all
        or (
            status = 'quarantined' and is_segment and {{ staged_lsns }}
            and startswith(quarantine_reason, 'orphan segments:')
            and (event_source, logicalid) in (
                select row_values['source'], row_values['logicalid'] from ({{ new_lines }}) as new_lines
            )
        )
    {%- endif %}
),

-- landing batches that brought CES lines, newest first (an incomplete split message waits
-- var cdc_ces_orphan_after_batches of them for its missing segments)
batches as (
    select
        _batch_id,
        dense_rank() over (order by _batch_id desc) - 1 as batches_since
    from (
        select distinct _batch_id from landed_rows
        where not waiting
        {%- if incremental %}
        union
        select distinct _batch_id from {{ prior }} where status != 'complete' and _batch_id >= '{{ waiting_from }}'
        {%- endif %}
    ) as landed_batches
)
{%- endmacro %}

{#- Incremental only: `staged_ids` (source + id of the lines `prior` holds settled, where
    `staged_lsns` holds) and `settled_messages` (the segment indexes of messages settled by an
    earlier run). Two CTEs, ending without a comma. -#}
{% macro _ces_staged_lookups(prior, staged_lsns) -%}
-- lines staged earlier (not waiting): their ids, and the segments of settled messages
staged_ids as (
    select distinct event_source, event_id
    from {{ prior }}
    where status not in ('complete', 'pending') and event_source is not null and event_id is not null
        and {{ staged_lsns }}
),

settled_messages as (
    select event_source, logicalid, collect_set(segment_index) as segment_indexes
    from {{ prior }}
    where is_segment and status != 'pending' and {{ staged_lsns }}
        and not (status = 'quarantined' and startswith(quarantine_reason, 'orphan segments:'))
    group by event_source, logicalid
)
{%- endmacro %}

{#- From landed_rows: `envelope` (the CloudEvent's fields as text) and `checked` (segment index,
    final flag, early form, split total, and line_problem: why the line cannot be trusted, or
    NULL). Two CTEs, ending without a comma. -#}
{% macro _ces_checked_lines() -%}
{%- set logicalid_pattern = sqlserver_cdc._ces_logicalid_pattern() -%}
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
        _ingested_at,
        row_key,
        waiting
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
                    when not coalesce(logicalid rlike '{{ logicalid_pattern }}', false)
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
)
{%- endmacro %}

{#- From checked (and, when `incremental`, staged_ids and settled_messages): `copies` (id_copy,
    the copy number of source + id), `lines`, `segment_copies` and `segments`: each line with
    is_segment, whether it is its message's segment (the first readable copy of its index, not of
    a settled message). Four CTEs, ending without a comma. -#}
{% macro _ces_segments(incremental) -%}
-- at-least-once delivery: the first landed copy of source + id wins (in these lines or
-- staged earlier); a segment delivered again under another id is the same segment of the same
-- logicalid
copies as (
    select
        checked.*,
        case
            when checked.event_source is null or checked.id is null then 1
            {%- if incremental %}
            when not checked.waiting and staged_ids.event_id is not null then 2
            {%- endif %}
            else row_number() over (
                partition by checked.event_source, checked.id order by checked._batch_id, checked._source_file
            )
        end as id_copy
    from checked
    {%- if incremental %}
    left join staged_ids
        on checked.event_source = staged_ids.event_source and checked.id = staged_ids.event_id
    {%- endif %}
),

-- each line with what makes it its message's segment: the first readable copy of its segment
-- index (a later copy, under another id, is a duplicate), not of a message settled by an earlier
-- run. The windows from here on all partition by source + logicalid: one shuffle, one sort.
lines as (
    select
        copies.*,
        copies.line_problem is null and copies.id_copy = 1 as readable_copy,
        {%- if incremental %}
        -- a segment of a message settled by an earlier run (complete or quarantined) lands again
        coalesce(not copies.waiting and array_contains(settled_messages.segment_indexes, copies.segment_index), false)
            as settled_copy,
        -- a new segment of such a message
        not copies.waiting and settled_messages.logicalid is not null as after_settled
        {%- else %}
        false as settled_copy,
        false as after_settled
        {%- endif %}
    from copies
    {%- if incremental %}
    left join settled_messages
        on copies.event_source = settled_messages.event_source and copies.logicalid = settled_messages.logicalid
    {%- endif %}
),

segment_copies as (
    select
        *,
        coalesce(
            lag(struct(segment_index, readable_copy)) over segment_order = struct(segment_index, readable_copy), false
        ) as later_copy
    from lines
    window segment_order as (
        partition by event_source, logicalid order by segment_index, readable_copy, _batch_id, _source_file
    )
),

segments as (
    select
        *,
        readable_copy and not later_copy and not settled_copy and not after_settled as is_segment
    from segment_copies
)
{%- endmacro %}

{#- From segments (and batches): `message_lines` (each line with its message's segments summed
    up), `heads` (the head of a message with its joined data and batches_since), `parsed` (the
    data document parsed, indexes_complete, conflicting) and `documents` (readable, message_lsn,
    sequence_number). Four CTEs, ending without a comma. -#}
{% macro _ces_messages(orphan_after) -%}
{%- set data_schema = 'struct<eventsource: struct<db: string, `schema`: string, tbl: string,'
    ~ ' cols: array<struct<name: string, type: string, index: int>>,'
    ~ ' pkkey: array<struct<columnname: string, value: string>>,'
    ~ ' transaction: struct<commitlsn: string, beginlsn: string, sequencenumber: string, committime: string>>,'
    ~ ' eventrow: struct<old: string, current: string>>' -%}
-- each line with its message's segments summed up (every aggregate over the segments only)
message_lines as (
    select
        *,
        count_if(is_segment) over message as segment_count,
        min(if(is_segment, segment_index, null)) over message as first_index,
        max(if(is_segment, segment_index, null)) over message as last_index,
        count_if(is_segment and is_final) over message as finals,
        min(if(is_segment and is_final, segment_index, null)) over message as final_index,
        bool_and(if(is_segment, early_form, null)) over message as message_early_form,
        max(if(is_segment, split_total, null)) over message as message_split_total,
        sort_array(collect_list(if(is_segment, segment_index, null)) over message) as segment_indexes,
        collect_list(if(is_segment, struct(segment_index, data_text), null)) over message as segment_data,
        max_by(if(is_segment, _source_file, null), if(is_segment, _batch_id, null)) over message
            as message_source_file,
        min(if(is_segment, _batch_id, null)) over message as first_batch,
        max(if(is_segment, _batch_id, null)) over message as completed_batch,
        max(if(is_segment, _ingested_at, null)) over message as message_ingested_at
    from segments
    window message as (partition by event_source, logicalid)
),

-- a message's first segment (its head) stands for it: its data (the segments' data in index
-- order) is joined and parsed there, once
heads as (
    select /*+ broadcast(batches) */
        message_lines.*,
        message_lines.is_segment and message_lines.segment_index = message_lines.first_index as is_head,
        case
            when not (message_lines.is_segment and message_lines.segment_index = message_lines.first_index) then null
            when message_lines.segment_count = 1 then message_lines.data_text
            else concat_ws('', transform(array_sort(message_lines.segment_data), piece -> piece.data_text))
        end as message_data,
        coalesce(batches.batches_since, {{ orphan_after }}) as batches_since
    from message_lines
    -- a message first landed before the batches read here has waited its time
    left join batches
        on message_lines.first_batch = batches._batch_id
),

parsed as (
    select
        *,
        -- a contiguous run of segment indexes ending at the final segment (0- or 1-based)
        case
            when message_early_form and coalesce(message_split_total, 0) <= 1 then segment_count = 1
            when message_early_form
                then segment_count = message_split_total and last_index - first_index + 1 = segment_count
            else finals = 1 and final_index = last_index and last_index - first_index + 1 = segment_count
        end as indexes_complete,
        (finals > 1 or final_index < last_index) as conflicting,
        from_json(message_data, '{{ data_schema }}') as doc
    from heads
),

documents as (
    select
        *,
        doc.eventsource is not null and doc.eventrow is not null as readable,
        {{ sqlserver_cdc.lsn_normalize(
            "coalesce(doc.eventsource.transaction.commitlsn, element_at(split(logicalid, ':'), -2))", 'string') }}
            as message_lsn,
        coalesce(
            try_cast(doc.eventsource.transaction.sequencenumber as decimal(20, 0)),
            try_cast(element_at(split(logicalid, ':'), -1) as decimal(20, 0))
        ) as sequence_number
    from parsed
)
{%- endmacro %}

{#- From documents: `outcomes` (a message's status and problem, decided on its head; a message
    incomplete `orphan_after` batches after its first landed is quarantined) and `line_outcomes`
    (every line's line_status and line_reason). Two CTEs, ending without a comma. -#}
{% macro _ces_outcomes(orphan_after) -%}
-- a message's outcome, decided on its head
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
                    case when message_lsn is null then concat(
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
    from documents
),

-- every line with its own outcome: its message's (from the head) when it is a segment
line_outcomes as (
    select
        *,
        case
            when line_problem is not null then 'quarantined'
            when id_copy > 1 or later_copy or settled_copy then 'duplicate'
            when after_settled then 'quarantined'
            when message.status = 'complete' and message.problem is not null then 'quarantined'
            when message.status = 'complete' then 'assembled'
            else message.status
        end as line_status,
        case
            when line_problem is not null then line_problem
            when id_copy > 1 or later_copy or settled_copy then null
            when after_settled
                then concat(
                    'segment ', segment_index, ' of logicalid ', logicalid,
                    ' landed after its message was complete or quarantined'
                )
            else message.problem
        end as line_reason
    from (
        select
            *,
            max(if(is_head, named_struct('status', message_status, 'problem', message_problem), null)) over (
                partition by event_source, logicalid
            ) as message
        from outcomes
    ) as with_message
)
{%- endmacro %}

{#- From line_outcomes: `final`, the model's rows (one per line that needs writing, one more
    for the head of a complete message: its event). One CTE, without a comma. -#}
{% macro _ces_final() -%}
{%- set logicalid_pattern = sqlserver_cdc._ces_logicalid_pattern() -%}
-- one row per line (a line still waiting needs no update), and one more for the head of a
-- complete message: its event
final as (
    select
        id as event_id,
        event_source,
        logicalid,
        -- a line's LSN: the one its logicalid names (staged lines are looked up by it)
        case
            when is_event then message_lsn
            when logicalid rlike '{{ logicalid_pattern }}' then upper(element_at(split(logicalid, ':'), -2))
        end as commit_lsn,
        if(is_event, sequence_number, null) as sequence_number,
        if(is_event, {{ sqlserver_cdc.decode_operation('operation_text', 'ces') }}, null) as operation,  -- noqa: RF04
        if(is_event, doc.eventsource.db, null) as source_database,
        if(is_event, doc.eventsource.schema, null) as source_schema,
        if(is_event, doc.eventsource.tbl, null) as source_table,
        if(is_event, doc.eventsource.cols, null) as source_columns,
        if(
            is_event, map_from_entries(transform(doc.eventsource.pkkey, k -> struct(lower(k.columnname), k.value))), null
        ) as key_values,
        if(is_event, doc.eventrow.old, null) as old_image,
        if(is_event, doc.eventrow.current, null) as current_image,
        -- committime carries a Z even on servers not set to UTC: it is read as the server's
        -- wall clock, like lsn_time_mapping.tran_end_time, and made UTC from var
        -- cdc_source_time_zone (the repeated hour of a fall-back at its earlier offset); the
        -- early form has only `time`
        if(is_event, {{ sqlserver_cdc._source_time_to_utc(sqlserver_cdc.cast_from_text(
            "regexp_replace(coalesce(doc.eventsource.transaction.committime, event_time_text), '(Z|[+-][0-9]{2}:[0-9]{2})$', '')",
            'datetime2')) }}, null) as commit_time,
        if(is_event, segment_count, null) as segment_count,
        if(is_event, null, segment_index) as segment_index,
        not is_event and is_segment as is_segment,
        if(is_event, 'complete', line_status) as status,
        if(is_event, null, line_reason) as quarantine_reason,
        case
            when is_event and segment_count = 1 then landed_record
            when is_event then message_data
            -- a segment of a complete event needs its line no more (the event row carries the data)
            when line_status != 'assembled' then landed_record
        end as landed_record,
        if(is_event, message_source_file, _source_file) as _source_file,
        if(is_event, completed_batch, _batch_id) as _batch_id,
        if(is_event, message_ingested_at, _ingested_at) as _ingested_at,
        if(is_event, concat('event:', event_source, ':', logicalid), row_key) as row_key
    from line_outcomes
    lateral view explode(
        if(is_head and message_status = 'complete' and message_problem is null, array(true, false), array(false))
    ) emitted as is_event
    where is_event or not (waiting and line_status = 'pending')
)
{%- endmacro %}
