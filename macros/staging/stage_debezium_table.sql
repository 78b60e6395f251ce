{#- Staging for one tracked table fed by the Debezium SQL Server connector: the complete events of
    stg_debezium__events routed to it (by the declared topic, else by source db.schema.table,
    case-insensitively, db only when declared), with the row (after; before for a delete)
    decoded from the connector's encodings (by the event's schema when it has one, else by the
    declared SQL Server types and the table's debezium options) and typed to the declared types.
    Same columns as change-table staging: change_lsn is source.change_lsn (snapshot rows:
    zeros), command_id the event_serial_no; plus _has_<column>. A snapshot row (op r) is the
    key's state at its LSN and counts as an insert. An update's mask holds the columns whose
    value differs between before and after (every carried column when there is no before row,
    as in flattened events). Values that do not decode or cast, events without their key and
    events whose form (flattened or not) is not the declared one are quarantined. An
    incremental Delta table appended per landing batch (the events staged since its last
    batch), like change-table staging. -#}
{% macro stage_debezium_table(table_name) -%}
    {{ return(adapter.dispatch('stage_debezium_table', 'sqlserver_cdc')(table_name)) }}
{%- endmacro %}

{% macro spark__stage_debezium_table(table_name) -%}
{%- set t = sqlserver_cdc.tracked_table(table_name) -%}
{%- set form = 'flattened' if t.debezium.flattened else 'envelope' -%}
{%- set keys = t.key | map('lower') | list -%}
{{ sqlserver_cdc._staged_table_config() }}
with

events as (
    select
        {%- if t.tenant %}
        {{ sqlserver_cdc._event_database('debezium', 'name') }} as _database_name,
        {%- endif %}
        event_id, event_form, commit_lsn, change_lsn, event_serial_no, operation, commit_time,
        before_values, after_values, column_types, landed_record, _source_file, _batch_id, _ingested_at
    from ({{ sqlserver_cdc._landed_since(sqlserver_cdc._event_route(t), ref('stg_debezium__events')) }}) as routed_events
),

-- the row an event carries (after; before for a delete), each value with its encoding: the
-- schema's logical type, else what the connector gives the declared type
row_values as (
    select
        *,
        {%- for c in t.columns %}
        {%- set source = sqlserver_cdc._sql_string(c.source | lower) %}
        row_image[{{ source }}] as value_{{ c.name }},
        coalesce(
            column_types[{{ source }}].name,
            case when column_types[{{ source }}].type = 'bytes' then 'bytes' end,
            {%- if sqlserver_cdc.spark_type(c.type) != 'binary' %}
            case when column_types[{{ source }}] is not null then 'plain' end,
            {%- endif %}
            '{{ sqlserver_cdc.debezium_encoding(c.type, t.debezium) }}'
        ) as encoding_{{ c.name }},
        {%- endfor %}
        operation in ('insert', 'snapshot') as _inserted
    from (
        select
            *,
            case when operation = 'delete' then before_values else after_values end as row_image
        from events
    )
),

texts as (
    select
        *,
        {%- for c in t.columns %}
        {{ sqlserver_cdc.debezium_value_text('value_' ~ c.name, 'encoding_' ~ c.name,
            "coalesce(try_cast(column_types[" ~ sqlserver_cdc._sql_string(c.source | lower) ~ "].scale as int), "
                ~ sqlserver_cdc.declared_scale(c.type) ~ ")",
            sqlserver_cdc.fraction_digits(c.type), sqlserver_type=c.type) }} as text_{{ c.name }},
        {%- if c.name | lower not in keys %}
        _inserted or map_contains_key(row_image, {{ sqlserver_cdc._sql_string(c.source | lower) }}) as _has_{{ c.name }},
        {%- endif %}
        {%- endfor %}
        case when event_form != '{{ form }}' then
            {%- if form == 'flattened' %}
            'an unflattened Debezium event, but table {{ t.name }} declares debezium.flattened: true'
            {%- else %}
            'a flattened (ExtractNewRecordState) event, but table {{ t.name }} does not declare debezium.flattened: true'
            {%- endif %}
        end as unreadable
    from row_values
),

{%- set reasons = [] %}
{%- for c in t.columns if sqlserver_cdc._plausible_encodings(c.type) %}
    {%- do reasons.append("case when value_" ~ c.name ~ " is not null and text_" ~ c.name ~ " is null then "
        ~ sqlserver_cdc.debezium_value_invalid_reason("'" ~ c.name ~ "'", 'value_' ~ c.name, 'encoding_' ~ c.name, c.type)
        ~ " end") %}
{%- endfor %}
{{ sqlserver_cdc._typed_and_validated(t, decoded=[sqlserver_cdc.operation_number('operation') ~ ' as operation_code'],
    reasons=reasons, missing_key='is missing') }},

{{ sqlserver_cdc._event_final(t, 'change_lsn', 'cast(event_serial_no as int)', 'before_values', 'after_values') }}

select * from final
{%- endmacro %}

{% macro default__stage_debezium_table(table_name) -%}
    {{ exceptions.raise_compiler_error(sqlserver_cdc._not_supported('stage_debezium_table')) }}
{%- endmacro %}
