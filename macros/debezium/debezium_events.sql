{#- Debezium SQL Server connector events, one row per landed line of `relation` (the raw landing
    table, landing_kind 'debezium'): the line unwrapped from a Kafka record (key, value, topic,
    partition, offset) and from the JSON converter's {"schema", "payload"} envelope, Avro-JSON
    unions ({"string": "x"}) resolved, and the change read from the payload: the envelope (op,
    before, after, source) or the ExtractNewRecordState flattened row (__op, __deleted,
    __commit_lsn, ...). status: 'complete' (the first landed copy of a change), 'duplicate' (a
    replay: same table, LSNs, serial number, operation and row image), 'tombstone' (a null value:
    counted, carries nothing the marts need) or 'quarantined' (with quarantine_reason).
    replay_key identifies a change (a SHA-256 of those fields) on complete and duplicate rows.
    deduplicate=false marks no replay (every copy of a change is complete) and leaves replay_key,
    before_values and after_values to be pruned when not selected: begin_run's facts and the
    floor below need only each line's table, LSNs and whether it is a change.
    prior: the events already staged (model stg_debezium__events on an incremental run), whose
    complete rows at or above commit LSN prior_floor (the smallest of these lines') make a
    replay landed in a later batch a duplicate.
    A macro, not only a model, so begin_run can read the landed high-water mark from the raw
    table before staging takes the batch in. -#}
{% macro debezium_events(relation, prior=none, prior_floor=none, deduplicate=true) -%}
    {{ return(adapter.dispatch('debezium_events', 'sqlserver_cdc')(relation, prior, prior_floor, deduplicate)) }}
{%- endmacro %}

{% macro spark__debezium_events(relation, prior=none, prior_floor=none, deduplicate=true) -%}
with

{{ sqlserver_cdc._debezium_payloads(relation) }},

{{ sqlserver_cdc._debezium_change_fields() }},

{{ sqlserver_cdc._debezium_checked_changes() }},

{{ sqlserver_cdc._debezium_copies(prior, prior_floor, deduplicate) }},

{{ sqlserver_cdc._debezium_final() }}

select * from final
{%- endmacro %}

{% macro default__debezium_events(relation, prior=none, prior_floor=none, deduplicate=true) -%}
    {{ exceptions.raise_compiler_error(sqlserver_cdc._not_supported('debezium_events')) }}
{%- endmacro %}

{#- An Avro-JSON union value ({"string": "x"}, {"long": 1}, {"server1.dbo.t.Value": {...}}) as
    the value it holds (Avro-JSON bytes, ISO-8859-1 characters, as base64 like the JSON
    converter's); any other text as it is. -#}
{% macro _debezium_unwrap(expr) -%}
    (case
        when {{ expr }} rlike '^\\s*[{]\\s*"({{ sqlserver_cdc._avro_type_name_pattern()[1:-1] }})"\\s*:' then transform(
            array(from_json({{ expr }}, 'map<string, string>')),
            u -> case
                when size(u) = 1 and map_keys(u)[0] rlike '{{ sqlserver_cdc._avro_type_name_pattern() }}'
                    then case
                        when map_keys(u)[0] = 'bytes' then base64(encode(map_values(u)[0], 'ISO-8859-1'))
                        else map_values(u)[0]
                    end
                else {{ expr }}
            end
        )[0]
        else {{ expr }}
    end)
{%- endmacro %}

{#- The names an Avro-JSON union tags its value with: a primitive type, or a record's full name. -#}
{% macro _avro_type_name_pattern() -%}
    ^(null|boolean|int|long|float|double|string|bytes|[A-Za-z_][A-Za-z0-9_]*([.][A-Za-z_][A-Za-z0-9_]*)+)$
{%- endmacro %}

{#- The first step, from `relation`: `landed_rows` (its Debezium lines), `records` (is_record: a
    Kafka record written whole), `values_read` (the event's value as text and map, topic,
    partition, offset), `payloads` (has_schema: the JSON converter's {"schema", "payload"}
    wrapper) and `envelopes` (payload, value_schema, is_tombstone). Five CTEs, ending without a
    comma. -#}
{% macro _debezium_payloads(relation) -%}
{%- set column_schema = 'array<struct<field: string, type: string, name: string, parameters: map<string, string>>>' -%}
{%- set value_schema = 'struct<fields: array<struct<field: string, type: string, name: string, '
    ~ 'parameters: map<string, string>, fields: ' ~ column_schema ~ '>>>' -%}
landed_rows as (
    select * from {{ relation }}
    where landing_kind = 'debezium'
),

-- a Kafka record written whole carries the event as its value
records as (
    select
        *,
        coalesce(
            map_contains_key(row_values, 'value') and (
                map_contains_key(row_values, 'topic') or map_contains_key(row_values, 'partition')
                or map_contains_key(row_values, 'offset')
            ),
            false
        ) as is_record
    from landed_rows
),

values_read as (
    select
        *,
        case when is_record then row_values['value'] else raw_text end as value_text,
        case when is_record then from_json(row_values['value'], 'map<string, string>') else row_values end
            as value_map,
        coalesce(case when is_record then row_values['topic'] end, entity) as topic,
        case when is_record then row_values['partition'] end as kafka_partition,
        case when is_record then row_values['offset'] end as kafka_offset
    from records
),

-- the JSON converter with schemas enabled wraps the payload: {"schema": ..., "payload": ...}
payloads as (
    select
        *,
        coalesce(map_contains_key(value_map, 'payload') and map_contains_key(value_map, 'schema'), false)
            as has_schema
    from values_read
),

envelopes as (
    select
        *,
        case when has_schema then from_json(value_map['payload'], 'map<string, string>') else value_map end
            as payload,
        case when has_schema then from_json(value_map['schema'], '{{ value_schema }}') end as value_schema,
        value_text is null or trim(value_text) = 'null' or (has_schema and value_map['payload'] is null)
            as is_tombstone
    from payloads
)
{%- endmacro %}

{#- From envelopes: `shaped` (is_envelope, is_flattened, payload_values: the Avro-JSON unions
    resolved), `sourced` (source_fields) and `fields` (the change's fields as text: op_text,
    <field>_text, before_text, after_text, flattened_row, row_schema), from the envelope or the
    flattened row's __ fields. Three CTEs, ending without a comma. -#}
{% macro _debezium_change_fields() -%}
shaped as (
    select
        *,
        coalesce(map_contains_key(payload, 'op') and map_contains_key(payload, 'source'), false) as is_envelope,
        coalesce(exists(map_keys(payload), k -> startswith(k, '__')), false) as is_flattened,
        -- Avro-JSON unions ({"string": "x"}) resolved once for every field
        transform_values(payload, (k, v) -> {{ sqlserver_cdc._debezium_unwrap('v') }}) as payload_values
    from envelopes
),

sourced as (
    select
        *,
        transform_values(
            from_json(payload_values['source'], 'map<string, string>'),
            (k, v) -> {{ sqlserver_cdc._debezium_unwrap('v') }}
        ) as source_fields
    from shaped
),

-- the change's fields, from the envelope or from the flattened row's __ fields (add.fields)
fields as (
    select
        *,
        case
            when is_envelope then payload_values['op']
            else coalesce(
                payload_values['__op'],
                case when lower(payload_values['__deleted']) = 'true' then 'd' end,
                'u'
            )
        end as op_text,
        {%- for field, flattened in [
            ('commit_lsn', ['__commit_lsn', '__source_commit_lsn', '__lsn']),
            ('change_lsn', ['__change_lsn', '__source_change_lsn']),
            ('event_serial_no', ['__event_serial_no', '__source_event_serial_no']),
            ('ts_ms', ['__source_ts_ms', '__ts_ms']),
            ('snapshot', ['__snapshot', '__source_snapshot']),
            ('db', ['__db', '__source_db']),
            ('name', ['__name', '__source_name']),
            ('schema', ['__schema', '__source_schema']),
            ('table', ['__table', '__source_table']),
        ] %}
        case
            when is_envelope then source_fields['{{ field }}']
            else coalesce({% for name in flattened %}payload_values['{{ name }}']{{ ', ' if not loop.last }}{% endfor %})
        end as {{ field }}_text,
        {%- endfor %}
        case when is_envelope then payload_values['before'] end as before_text,
        case when is_envelope then payload_values['after'] end as after_text,
        -- a flattened row is the row itself (a delete rewritten by delete.handling.mode=rewrite
        -- is the row before it), without the __ metadata fields
        case when not is_envelope then map_filter(payload, (k, v) -> not startswith(k, '__')) end as flattened_row,
        -- the schema of the row's columns: the envelope's before / after struct, or the flattened row
        case
            when is_envelope then try_element_at(filter(value_schema.fields, f -> f.field in ('after', 'before')), 1).fields
            else transform(value_schema.fields, f -> struct(f.field, f.type, f.name, f.parameters))
        end as row_schema
    from sourced
)
{%- endmacro %}

{#- From fields: `decoded` (operation, commit_lsn, change_lsn_normalized, event_serial_no,
    ts_ms, before_row, after_row, topic_parts), `checked` (quarantine_reason) and `unwrapped`
    (before_values, after_values: keyed by lower-case column name, unions resolved). Three CTEs,
    ending without a comma. -#}
{% macro _debezium_checked_changes() -%}
decoded as (
    select
        *,
        {{ sqlserver_cdc.decode_operation('op_text', 'debezium') }} as operation,
        {{ sqlserver_cdc.lsn_normalize('commit_lsn_text', 'string') }} as commit_lsn,
        {{ sqlserver_cdc.lsn_normalize('change_lsn_text', 'string') }} as change_lsn_normalized,
        try_cast(event_serial_no_text as bigint) as event_serial_no,
        try_cast(ts_ms_text as bigint) as ts_ms,
        {%- for image, when in [('before', "= 'd'"), ('after', "!= 'd'")] %}
        case
            when is_envelope then from_json({{ image }}_text, 'map<string, string>')
            when lower(op_text) {{ when }} then flattened_row
        end as {{ image }}_row,
        {%- endfor %}
        -- a topic is <topic.prefix>.<db>.<schema>.<table>: its parts route events that name no table
        split(topic, '\\.') as topic_parts
    from fields
),

checked as (
    select
        *,
        case
            when is_tombstone then null
            when value_map is null and row_values is null then 'not a JSON object'
            when value_map is null then concat('Kafka record value is not a JSON object: ', left(value_text, 200))
            when payload is null then 'payload is not a JSON object'
            when not is_envelope and not is_flattened
                then 'not a Debezium change event (no op and source, and no __ fields of a flattened event)'
            else nullif(concat_ws(
                '; ',
                case when operation is null then concat('unknown op: ', coalesce(op_text, 'missing')) end,
                {{ sqlserver_cdc.lsn_invalid_reason('commit_lsn_text', 'source.commit_lsn', normalized='commit_lsn') }},
                {{ sqlserver_cdc.lsn_invalid_reason('change_lsn_text', 'source.change_lsn', required=false,
                    normalized='change_lsn_normalized') }},
                case when event_serial_no_text is not null and event_serial_no is null
                    then concat('invalid source.event_serial_no: ', event_serial_no_text) end,
                case when ts_ms_text is not null and ts_ms is null
                    then concat('invalid source.ts_ms: ', ts_ms_text) end,
                case when is_envelope and operation in ('insert', 'update_after', 'snapshot') and after_row is null
                    then concat('op ', op_text, ' without an after row') end,
                case when is_envelope and operation = 'delete' and before_row is null
                    then 'op d without a before row' end
            ), '')
        end as quarantine_reason
    from decoded
),

-- rows keyed by lower-case column name, values unwrapped from Avro-JSON unions (here, once,
-- below the replay window, rather than in every expression that reads a column)
unwrapped as (
    select
        *,
        {%- for image in ['before', 'after'] %}
        transform_values(
            transform_keys({{ image }}_row, (k, v) -> lower(k)), (k, v) -> {{ sqlserver_cdc._debezium_unwrap('v') }}
        ) as {{ image }}_values{{ ',' if not loop.last }}
        {%- endfor %}
    from checked
)
{%- endmacro %}

{#- From unwrapped: `keyed` (replay_key, a SHA-256 of what identifies a change) and `copies`
    (copy_number: 1 for the first landed copy, in these lines or, with `prior`, among its complete
    rows at or above commit LSN `prior_floor`; always 1 when not `deduplicate`). Two CTEs,
    ending without a comma. -#}
{% macro _debezium_copies(prior, prior_floor, deduplicate) -%}
-- at-least-once delivery: a replayed event repeats the table, LSNs, serial number, operation
-- and row image (not the connector's ts_ms); the first landed copy wins, in this batch or
-- already staged
keyed as (
    select
        *,
        case when not is_tombstone and quarantine_reason is null then sha2(to_json(named_struct(
            'db', lower(coalesce(db_text, try_element_at(topic_parts, -3))),
            'schema', lower(coalesce(schema_text, try_element_at(topic_parts, -2))),
            'table', lower(coalesce(table_text, try_element_at(topic_parts, -1))),
            'commit_lsn', commit_lsn, 'change_lsn', change_lsn_normalized, 'event_serial_no', event_serial_no,
            'operation', operation, 'row', coalesce(after_values, before_values)
        )), 256) end as replay_key
    from unwrapped
),

copies as (
    select
        keyed.*,
        {%- if not deduplicate %}
        1 as copy_number
        {%- else %}
        case
            when keyed.replay_key is null then 1
            {%- if prior is not none %}
            when staged.replay_key is not null then 2
            {%- endif %}
            else row_number() over (
                partition by keyed.replay_key
                order by keyed._batch_id, keyed._source_file, try_cast(keyed.kafka_partition as int),
                    try_cast(keyed.kafka_offset as bigint)
            )
        end as copy_number
        {%- endif %}
    from keyed
    {%- if deduplicate and prior is not none %}
    left join (
        select distinct replay_key from {{ prior }}
        where status = 'complete'{% if prior_floor is not none %} and commit_lsn >= '{{ prior_floor }}'{% endif %}
    ) as staged
        on keyed.replay_key = staged.replay_key
    {%- endif %}
)
{%- endmacro %}

{#- From copies: `final`, the model's rows (one per landed line, with its status). One CTE,
    without a comma. -#}
{% macro _debezium_final() -%}
final as (
    select
        concat_ws('/', topic, kafka_partition, kafka_offset) as event_id,
        topic,
        coalesce(db_text, try_element_at(topic_parts, -3)) as source_database,
        coalesce(schema_text, try_element_at(topic_parts, -2)) as source_schema,
        coalesce(table_text, try_element_at(topic_parts, -1)) as source_table,
        -- the connector's logical name (its topic prefix): the server of the database
        coalesce(name_text, case when size(topic_parts) >= 4
            then array_join(slice(topic_parts, 1, size(topic_parts) - 3), '.') end) as source_server,
        case when is_envelope then 'envelope' when is_flattened then 'flattened' end as event_form,
        commit_lsn,
        -- snapshot rows carry no change LSN or serial number: they sort before the changes of
        -- their commit LSN
        coalesce(change_lsn_normalized, '00000000000000000000') as change_lsn,
        coalesce(event_serial_no, 0) as event_serial_no,
        operation,
        lower(coalesce(snapshot_text, 'false')) in ('true', 'last', 'first', 'first_in_data_collection',
            'last_in_data_collection', 'incremental') as is_snapshot,
        -- where a snapshot row stands in its snapshot: first, true, last, first_in_data_collection,
        -- last_in_data_collection or incremental (docs/landing.md "Snapshots": `last` completes one)
        case when lower(snapshot_text) != 'false' then lower(snapshot_text) end as snapshot_marker,
        timestamp_millis(ts_ms) as commit_time,
        before_values,
        after_values,
        map_from_entries(transform(
            row_schema,
            c -> struct(lower(c.field), struct(c.type as type, c.name as name, c.parameters['scale'] as scale))
        )) as column_types,
        case
            when is_tombstone then 'tombstone'
            when quarantine_reason is not null then 'quarantined'
            when copy_number > 1 then 'duplicate'
            else 'complete'
        end as status,
        quarantine_reason,
        replay_key,
        coalesce(raw_text, to_json(row_values)) as landed_record,
        _source_file,
        _batch_id,
        _ingested_at
    from copies
)
{%- endmacro %}
