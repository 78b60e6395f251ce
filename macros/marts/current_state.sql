{#- Current-state mart (SCD type 1) of a tracked table: one row per key with the captured columns,
    the commit LSN, commit time and operation of the change that produced it. Deleted keys
    disappear, or stay with is_deleted = true when the table declares soft_deletes: true.
    operation is the net operation of the last transaction that changed the key (so it does not
    depend on how runs cut the change stream). Incremental: each key's latest transaction in the
    window replaces the stored row in the partitions the window touches, only if it is not older,
    so re-running a window changes nothing. Channels whose events arrive late (CES) rebuild each
    key touched by newly arrived events from all its events instead, so a late event lands in
    LSN order. With incremental_strategy merge (delta / iceberg) an
    incremental run returns only the window's latest row per key, deleted keys included, and
    mart_merge_sql deletes, updates (when not older) or inserts them. -#}
{% macro current_state(table_name) -%}
    {{ return(adapter.dispatch('current_state', 'sqlserver_cdc')(table_name)) }}
{%- endmacro %}

{% macro default__current_state(table_name) -%}
{%- set t = sqlserver_cdc.tracked_table(table_name) -%}
{{ config(meta={'cdc_mart': 'current_state', 'cdc_table': table_name}) }}
{%- set columns = t.columns | map(attribute='name') | list -%}
{%- set non_key = sqlserver_cdc._non_key_columns(t) -%}
{%- set out_columns = t.key + non_key + ['commit_lsn', 'commit_time', 'operation', 'is_deleted', '_bucket'] -%}
{%- set merging = sqlserver_cdc._mart_merges(t) -%}
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

applied as (
    select
        {%- for c in t.key + non_key %}
        {{ c }},
        {%- endfor %}
        commit_lsn,
        commit_time,
        {{ sqlserver_cdc._operation_name('operation_code') }} as operation,
        operation_code = 1 as is_deleted,
        {{ sqlserver_cdc._bucket(t) }} as _bucket,
        1 as _priority
    from transactions
),

candidates as (
    select * from applied
    {%- if is_incremental() and not merging %}
    union all
    select {% for c in out_columns %}stored.{{ c }}, {% endfor %}0 as _priority
    from {{ this }} as stored
    {%- if recompute %}
    -- a touched key is rebuilt from all its events: its stored row goes
    left anti join touched
        on {{ sqlserver_cdc._key_match(t, 'stored', 'touched') }}
    where stored._bucket in (select distinct {{ sqlserver_cdc._bucket(t) }} from touched)
    {%- else %}
    where stored._bucket in (select distinct _bucket from applied)
    {%- endif %}
    {%- endif %}
),

ranked as (
    select
        *,
        row_number() over (
            partition by {{ t.key | join(', ') }} order by commit_lsn desc, _priority desc
        ) as _rank
    from candidates
),

final as (
    select {{ out_columns | join(', ') }}
    from ranked
    where _rank = 1
    {%- if not t.soft_deletes and not merging %}
        and not is_deleted
    {%- endif %}
)

select * from final
{%- if is_incremental() and not merging %}
union all
{{ sqlserver_cdc._emptied_bucket_rows(t, out_columns,
    'select distinct ' ~ sqlserver_cdc._bucket(t) ~ ' as _bucket from touched' if recompute
    else 'select distinct _bucket from applied') }}
{%- endif %}
{%- endif %}
{%- endmacro %}
