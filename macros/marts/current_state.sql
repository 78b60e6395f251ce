{#- Current-state mart (SCD type 1) of a tracked table: one row per key with the captured columns,
    the commit LSN, commit time and operation of the change that produced it. Deleted keys
    disappear, or stay with is_deleted = true when the table declares soft_deletes: true.
    operation is the net operation of the last transaction that changed the key (so it does not
    depend on how runs cut the change stream). Built from the net transactions of its window
    (_transactions), by the materialization cdc_mart, after the history mart. Incremental (a
    Delta MERGE, one commit): a build returns each key's latest transaction above its watermark,
    deleted keys included, and mart_merge_sql deletes, updates (when not older than the stored
    row) or inserts it, so re-running a window changes nothing.
    Channels whose events arrive late (CES, Debezium) take each touched key's rebuilt transactions
    instead, so a late event lands in LSN order; a key's removal marker returns a removal row
    (operation NULL) that deletes its stored row. Built from scratch in the same dbt invocation as
    the history mart (see _current_from_history), it is the history's last version of each key,
    so the window's transactions are netted once. -#}
{% macro current_state(table_name) -%}
    {{ return(adapter.dispatch('current_state', 'sqlserver_cdc')(table_name)) }}
{%- endmacro %}

{% macro spark__current_state(table_name) -%}
{%- set t = sqlserver_cdc._mart_table(sqlserver_cdc.tracked_table(table_name)) -%}
{{ config(materialized='cdc_mart', meta={'cdc_mart': 'current_state', 'cdc_table': table_name}) }}
{{ sqlserver_cdc._mart_dependencies(t, 'current_state') }}
{%- set non_key = sqlserver_cdc._non_key_columns(t) -%}
{%- set out_columns = t.key + non_key + ['commit_lsn', 'commit_time', 'operation', 'is_deleted'] -%}
{%- set window = sqlserver_cdc._mart_window(t) -%}
{%- if window.empty %}
select {{ out_columns | join(', ') }} from {{ this }} where false
{%- elif sqlserver_cdc._current_from_history(t, window) %}
-- built from scratch right after the history mart, from the same window: each key's last version
select
    {%- for c in t.key + non_key %}
    {{ c }},
    {%- endfor %}
    valid_from_lsn as commit_lsn,
    valid_from as commit_time,
    operation,
    is_deleted
from {{ ref(t.name ~ '_history') }}
where valid_to_lsn is null
    {%- if not t.soft_deletes %}
    and not is_deleted
    {%- endif %}
{%- else %}
with

window_transactions as (
    {{ sqlserver_cdc._transactions(t, window) | indent(4) }}
),

ranked as (
    select
        *,
        -- a removal marker (commit_lsn NULL) ranks first only when it is the key's only row
        row_number() over (partition by {{ t.key | join(', ') }} order by commit_lsn desc nulls last) as _rank
    from window_transactions
),

final as (
    select
        {%- for c in t.key + non_key %}
        {{ c }},
        {%- endfor %}
        commit_lsn,
        commit_time,
        {{ sqlserver_cdc._operation_name('operation_code') }} as operation,
        operation_code = 1 as is_deleted
    from ranked
    where _rank = 1
        -- one row per key by construction (_rank); the rest of the current state's checks
        and {{ sqlserver_cdc._mart_guard(t, 'current state', {
            'key has a NULL part': sqlserver_cdc._any_null(t.key),
            'commit_lsn NULL': 'operation_code is not null and commit_lsn is null',
            'operation not insert, update, delete or snapshot': 'operation_code not in (1, 2, 4, 5)'},
            t.key + ['commit_lsn']) }}
    {%- if window.full %}
        -- built from scratch: a removal marker has nothing to remove
        and operation_code is not null
        {%- if not t.soft_deletes %}
        and operation_code != 1
        {%- endif %}
    {%- endif %}
)

select * from final
{%- endif %}
{%- endmacro %}

{% macro default__current_state(table_name) -%}
    {{ exceptions.raise_compiler_error(sqlserver_cdc._not_supported('current_state')) }}
{%- endmacro %}

{#- True when a current-state build from scratch can take each key's last history version instead of
    netting its window again: the history mart was built from scratch in this dbt invocation (it is
    selected and its window is full, with the same bounds) and keeps what the current state needs
    (every version's own LSN and operation: no history_columns; the deleted version when the table
    keeps deleted rows: soft_deletes needs history_delete_versions). window: the current state's;
    current: its model name when another node asks (the table's checks). -#}
{% macro _current_from_history(t, window, current=none) -%}
    {%- if not window.full or t.history_columns is not none or (t.soft_deletes and not t.history_delete_versions) -%}
        {{ return(false) }}
    {%- endif -%}
    {%- if not execute -%}
        {{ return(true) }}
    {%- endif -%}
    {%- set name = t.name ~ '_history' -%}
    {%- set node = graph.nodes.values() | selectattr('resource_type', 'equalto', 'model') | selectattr('name', 'equalto', name) | first -%}
    {%- set ours, theirs = sqlserver_cdc.cdc_window(current), sqlserver_cdc.cdc_window(name) -%}
    {{ return(node is defined and node.unique_id in selected_resources and theirs.full
        and theirs.upper_lsn == ours.upper_lsn and theirs.upper_batch == ours.upper_batch) }}
{%- endmacro %}
