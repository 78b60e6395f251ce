{#- Current-state mart (SCD type 1) of a tracked table: one row per key with the captured columns,
    the commit LSN, commit time and operation of the change that produced it. Deleted keys
    disappear, or stay with is_deleted = true when the table declares soft_deletes: true.
    operation is the net operation of the last transaction that changed the key (so it does not
    depend on how runs cut the change stream). Incremental (a Delta MERGE, one commit): a run
    returns each key's latest transaction in its window, deleted keys included, and
    mart_merge_sql deletes, updates (when not older than the stored row) or inserts it, so
    re-running a window changes nothing. Channels whose events arrive late (CES, Debezium)
    rebuild each key touched by newly arrived events from all its events instead, so a late event
    lands in LSN order; a touched key whose events no longer net to any change returns a removal
    row (operation NULL) that deletes its stored row. -#}
{% macro current_state(table_name) -%}
    {{ return(adapter.dispatch('current_state', 'sqlserver_cdc')(table_name)) }}
{%- endmacro %}

{% macro default__current_state(table_name) -%}
{%- set t = sqlserver_cdc.tracked_table(table_name) -%}
{{ config(meta={'cdc_mart': 'current_state', 'cdc_table': table_name}) }}
{%- do sqlserver_cdc._require_merge(t) -%}
{%- set columns = t.columns | map(attribute='name') | list -%}
{%- set non_key = sqlserver_cdc._non_key_columns(t) -%}
{%- set out_columns = t.key + non_key + ['commit_lsn', 'commit_time', 'operation', 'is_deleted'] -%}
{%- set window = sqlserver_cdc._mart_window(t) -%}
{%- set recompute = sqlserver_cdc._recomputes_keys(t) -%}
{%- if window and window.empty %}
select {{ out_columns | join(', ') }} from {{ this }} where false
{%- else %}
with

bounds as (
    {{ sqlserver_cdc._mart_bounds(t) }}
),
{%- if recompute %}

touched as (
    {{ sqlserver_cdc._mart_touched(t) }}
),
{%- endif %}

changes as (
    {{ sqlserver_cdc._mart_changes(t, window) }}
),

transactions as (
    select * from {{ sqlserver_cdc.net_changes('changes', t.key + ['commit_lsn'], columns, 'all',
        extra_columns=['commit_time']) }}
),

ranked as (
    select
        *,
        row_number() over (partition by {{ t.key | join(', ') }} order by commit_lsn desc) as _rank
    from transactions
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
    {%- if not is_incremental() and not t.soft_deletes %}
        and operation_code != 1
    {%- endif %}
)

select * from final
{%- if is_incremental() and recompute %}
union all
-- a touched key whose events no longer net to any change (an insert and its delete in one
-- transaction, completed by a late event) loses its stored row
select
    {%- for c in out_columns %}
    {{ 'touched.' ~ c if c in t.key else 'null as ' ~ c }}{{ ',' if not loop.last }}
    {%- endfor %}
from touched
left anti join final
    on {{ sqlserver_cdc._key_match(t, 'touched', 'final') }}
{%- endif %}
{%- endif %}
{%- endmacro %}
