{#- Staging for one tracked table fed by change tables: the landed rows of its capture instances
    (docs/tables.md "Capture-instance changes"), typed, `__$` names renamed, operation decoded, the
    update mask in the table's ordinals, capture_instance the instance a row came from; and the rows of its snapshots (docs/landing.md
    "Snapshots") as rows with operation `snapshot` at the snapshot's LSN (commit and change LSN),
    no update mask. An incremental Delta table appended per
    landing batch: every landed row is decoded once and comes out once; rows that cannot be
    trusted carry quarantine_reason (and their landed record as JSON) and are left out
    downstream. The commit time is not joined here (a commit's lsn_time_mapping row may land in
    a later batch): the marts join it for the rows of their window. Each value is decoded once
    (text, then decoded, then validated CTEs) to keep Spark's plans small. -#}
{% macro stage_change_table(table_name) -%}
    {{ return(adapter.dispatch('stage_change_table', 'sqlserver_cdc')(table_name)) }}
{%- endmacro %}

{% macro spark__stage_change_table(table_name) -%}
{%- set t = sqlserver_cdc.tracked_table(table_name) -%}
{{ sqlserver_cdc._staged_table_config() }}
with

landed_rows as (
    {{ sqlserver_cdc._landed_since(
        "((landing_kind = 'change_tables' and lower(entity) in ('" ~ t.instances | map(attribute='name') | map('lower') | join("', '") ~ "'))"
        ~ " or (landing_kind = 'snapshots' and lower(entity) = '" ~ t.name | lower ~ "'))"
        ~ " and " ~ sqlserver_cdc._raw_database_filter(t)) }}
),

-- the LSN each snapshot file is consistent at, from its manifest (landed in the same batch)
snapshot_files as (
    select explode(from_json(row_values['files'], 'array<string>')) as _source_file,
        row_values['snapshot_lsn'] as snapshot_lsn
    from ({{ sqlserver_cdc._landed_since("landing_kind = 'snapshot_manifest' and lower(entity) = '"
        ~ t.name | lower ~ "' and " ~ sqlserver_cdc._raw_database_filter(t)) }}) as manifests
),

texts as (
    select
        {%- if t.tenant %}
        {{ sqlserver_cdc._database_name_of(t, 'landed_rows.source_database') }} as source_database,
        {%- endif %}
        landed_rows.landing_kind = 'snapshots' as is_snapshot,
        case when landed_rows.landing_kind = 'change_tables' then lower(landed_rows.entity) end as capture_instance,
        coalesce(snapshot_files.snapshot_lsn, row_values['__$start_lsn']) as text_start_lsn,
        coalesce(snapshot_files.snapshot_lsn, row_values['__$seqval']) as text_seqval,
        row_values['__$operation'] as text_operation,
        row_values['__$update_mask'] as text_update_mask,
        row_values['__$command_id'] as text_command_id,
        {%- for c in t.columns %}
        row_values[{{ sqlserver_cdc._sql_string(c.source | lower) }}] as text_{{ c.name }},
        {%- endfor %}
        case when row_values is null then concat('not a JSON object: ', raw_text) end as unreadable,
        coalesce(to_json(row_values), raw_text) as landed_record,
        landed_rows._source_file,
        _batch_id,
        _ingested_at
    from landed_rows
    left join snapshot_files
        on landed_rows.landing_kind = 'snapshots' and landed_rows._source_file = snapshot_files._source_file
),

{#- the change metadata decoded; a snapshot row is the key's state at the snapshot's LSN (operation
    snapshot, code 2) -#}
{{ sqlserver_cdc._typed_and_validated(t, decoded=[
    sqlserver_cdc.lsn_normalize('text_start_lsn', 'string') ~ ' as commit_lsn',
    sqlserver_cdc.lsn_normalize('text_seqval', 'string') ~ ' as change_lsn',
    'try_cast(text_command_id as int) as command_id',
    "case when is_snapshot then 'snapshot' else " ~ sqlserver_cdc.decode_operation('text_operation', 'change_tables')
        ~ ' end as operation',
    sqlserver_cdc.update_mask_normalize('text_update_mask') ~ ' as update_mask'],
  reasons=[
    sqlserver_cdc.lsn_invalid_reason('text_start_lsn', '__$start_lsn', normalized='commit_lsn'),
    sqlserver_cdc.lsn_invalid_reason('text_seqval', '__$seqval', normalized='change_lsn'),
    "case when operation is null then concat('unknown __$operation: ', coalesce(text_operation, 'NULL')) end",
    sqlserver_cdc.update_mask_invalid_reason('text_update_mask', '__$update_mask', normalized='update_mask'),
    "case when text_command_id is not null and command_id is null then concat('invalid __$command_id: ', text_command_id) end"]) }},

{#- A change row landed twice (the same export under another name, a re-export of a range
    already landed) is quarantined as a duplicate of the first copy, which alone is applied:
    same capture instance, change LSN, operation and key as a trusted row staged before (read
    within the LSN range of what arrived, so Delta skips older files) or earlier in this batch. -#}
{%- set window = sqlserver_cdc.cdc_window() -%}
{%- set row_key = (['source_database'] if t.tenant else []) + ['capture_instance', 'change_lsn', 'operation'] + t.key %}
staged_before as (
    {%- if window.full %}
    select {{ row_key | join(', ') }}, _source_file from validated where false
    {%- else %}
    select {{ row_key | join(', ') }}, min(_source_file) as _source_file
    from {{ this }}
    where quarantine_reason is null
        {%- if t.tenant and window.parts %}
        and {{ sqlserver_cdc._lsn_parts(window.parts, 'commit_lsn', 'source_database', low_op='>=') }}
        {%- elif window.lower_lsn and window.upper_lsn %}
        and commit_lsn >= {{ sqlserver_cdc._sql_string(window.lower_lsn) }} and commit_lsn <= {{ sqlserver_cdc._sql_string(window.upper_lsn) }}
        {%- endif %}
    group by {{ row_key | join(', ') }}
    {%- endif %}
),

deduplicated as (
    select
        validated.* except (quarantine_reason),
        coalesce(validated.quarantine_reason,
            case when staged_before._source_file is not null
                then concat('duplicate of the change row landed from ', staged_before._source_file) end,
            case when validated.quarantine_reason is null and row_number() over (
                    partition by validated.quarantine_reason is null, {% for k in row_key %}validated.{{ k }}{{ ', ' if not loop.last }}{% endfor %}
                    order by validated._batch_id, validated._source_file) > 1
                then concat('duplicate of the change row landed from ', first_value(validated._source_file) over (
                    partition by validated.quarantine_reason is null, {% for k in row_key %}validated.{{ k }}{{ ', ' if not loop.last }}{% endfor %}
                    order by validated._batch_id, validated._source_file)) end) as quarantine_reason
    from validated
    left join staged_before
        on validated.quarantine_reason is null
        {%- for k in row_key %}
        and validated.{{ k }} <=> staged_before.{{ k }}
        {%- endfor %}
),

final as (
    select
        {%- if t.tenant %}
        validated.source_database,
        {%- endif %}
        validated.capture_instance,
        validated.commit_lsn,
        validated.change_lsn,
        validated.command_id,
        validated.operation,
        {{ sqlserver_cdc.operation_number('validated.operation') }} as operation_code,
        {{ sqlserver_cdc._table_mask(t, 'validated.update_mask', 'validated.capture_instance') }} as update_mask,
        {%- for c in t.columns %}
        validated.{{ c.name }},
        {%- endfor %}
        validated.quarantine_reason,
        case when validated.quarantine_reason is not null then validated.landed_record end as landed_record,
        validated._source_file,
        validated._batch_id,
        validated._ingested_at
    from deduplicated as validated
)

select * from final
{%- endmacro %}

{% macro default__stage_change_table(table_name) -%}
    {{ exceptions.raise_compiler_error(sqlserver_cdc._not_supported('stage_change_table')) }}
{%- endmacro %}

{#- A change row's update mask in the table's ordinals: the mask itself for an instance whose
    ordinals are the table's, else rebuilt bit by bit from the instance's ordinals. -#}
{% macro _table_mask(t, mask, instance) -%}
    {%- set ordinal = {} -%}
    {%- for c in t.columns -%}{%- do ordinal.update({c.name: c.ordinal}) -%}{%- endfor -%}
    {%- set remapped = [] -%}
    {%- for i in t.instances -%}
        {%- set flags = [] -%}
        {%- set moved = namespace(any=false) -%}
        {%- for c in i.columns -%}
            {%- do flags.append([ordinal[c.name], sqlserver_cdc.is_bit_set(mask, c.ordinal)]) -%}
            {%- set moved.any = moved.any or ordinal[c.name] != c.ordinal -%}
        {%- endfor -%}
        {%- if moved.any -%}
            {%- do remapped.append((i.name | lower, flags)) -%}
        {%- endif -%}
    {%- endfor -%}
    {%- if not remapped -%}
        {{ return(mask) }}
    {%- endif -%}
    {%- set width = t.columns | map(attribute='ordinal') | max -%}
    {%- set sql -%}
    case
        when {{ mask }} is null then null
        {%- for name, flags in remapped %}
        when {{ instance }} = '{{ name }}' then {{ sqlserver_cdc.update_mask_from_flags(flags, width=width) }}
        {%- endfor %}
        else {{ mask }}
    end
    {%- endset -%}
    {{ return(sql) }}
{%- endmacro %}
