{#- Staging for one tracked table fed by Change Event Streaming: the complete events of
    stg_ces__events routed to it by data.eventsource db.schema.tbl (case-insensitive; db only when
    the table names its database: _event_route; a tenant table's events carry their database's
    name in source_database), with the row image (current; old for a delete) typed to
    the declared SQL Server types. Same columns as change-table staging (change_lsn holds the
    in-transaction sequence number, 20 digits; command_id is NULL), plus _has_<column>: whether
    the event carried the column. A column an update or delete does not carry
    (@include_all_columns = 0, or no old values) is "unchanged", which the marts fill from the
    key's previous event. update_mask is built from the columns an update carries (and, when old
    values are sent, only those whose value differs). Values that do not cast and events without
    their key are quarantined, naming column and value. An incremental Delta table appended per
    landing batch (the events completed since its last batch), like change-table staging. -#}
{% macro stage_ces_table(table_name) -%}
    {{ return(adapter.dispatch('stage_ces_table', 'sqlserver_cdc')(table_name)) }}
{%- endmacro %}

{% macro spark__stage_ces_table(table_name) -%}
{%- set t = sqlserver_cdc.tracked_table(table_name) -%}
{%- set keys = t.key | map('lower') | list -%}
{{ sqlserver_cdc._staged_table_config() }}
with

events as (
    select
        {%- if t.tenant %}
        {{ sqlserver_cdc._event_database('ces', 'name') }} as _database_name,
        {%- endif %}
        event_id, commit_lsn, sequence_number, operation, key_values, old_image, current_image, commit_time,
        landed_record, _source_file, _batch_id, _ingested_at
    from ({{ sqlserver_cdc._landed_since(sqlserver_cdc._event_route(t), ref('stg_ces__events')) }}) as routed_events
),

images as (
    select
        *,
        transform_keys(from_json(current_image, 'map<string, string>'), (k, v) -> lower(k)) as current_values,
        transform_keys(from_json(coalesce(old_image, '{}'), 'map<string, string>'), (k, v) -> lower(k)) as old_values
    from events
),

-- the row image an event carries: current, or old for a delete
row_images as (
    select
        *,
        case when operation = 'delete' then old_values else current_values end as row_image
    from images
),

texts as (
    select
        *,
        {%- for c in t.columns %}
        {%- set source = sqlserver_cdc._sql_string(c.source | lower) %}
        {%- if c.name | lower in keys %}
        coalesce(row_image[{{ source }}], key_values[{{ source }}]) as text_{{ c.name }},
        {%- else %}
        row_image[{{ source }}] as text_{{ c.name }},
        operation = 'insert' or map_contains_key(row_image, {{ source }}) as _has_{{ c.name }},
        {%- endif %}
        {%- endfor %}
        case
            when operation != 'delete' and current_values is null
                then concat('eventrow.current is not a JSON object: ', current_image)
            when old_values is null then concat('eventrow.old is not a JSON object: ', old_image)
        end as unreadable
    from row_images
),

{{ sqlserver_cdc._typed_and_validated(t, decoded=[sqlserver_cdc.operation_number('operation') ~ ' as operation_code'],
    missing_key='is missing') }},

{{ sqlserver_cdc._event_final(t, "lpad(cast(sequence_number as string), 20, '0')", 'cast(null as int)',
    'old_values', 'current_values') }}

select * from final
{%- endmacro %}

{% macro default__stage_ces_table(table_name) -%}
    {{ exceptions.raise_compiler_error(sqlserver_cdc._not_supported('stage_ces_table')) }}
{%- endmacro %}
