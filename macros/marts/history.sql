{#- History mart (SCD type 2) of a tracked table: one version per key per committed transaction
    that changed it (changes inside a transaction collapse to its final state; insert-then-delete
    in one transaction leaves nothing), with valid_from_lsn / valid_to_lsn, valid_from / valid_to
    (commit times), is_current, operation and changed_columns (from the update mask). A delete
    closes the open version; history_delete_versions: true also keeps an explicit deleted version.
    Built from the net transactions of its window (_transactions), by the materialization
    cdc_mart, before the current-state mart. Incremental (a Delta MERGE, one commit): the versions of the transactions above the watermark are combined with the stored
    versions of the same keys that are still open after it, validity is recomputed for those keys
    only, and mart_merge_sql upserts the result by key and valid_from_lsn. Channels whose events
    arrive late (CES, Debezium) take every rebuilt transaction of each touched key instead, so a
    late event is placed in LSN order; a stored version of a touched key that the rebuild no
    longer has (after a removal marker: none at all) comes back as a removal row (operation NULL)
    that deletes it.
    history_columns (like "track history on"): an update whose mask touches none of those columns
    opens no version; it is folded into the open version, whose values become the latest values
    (valid_from_lsn, operation and changed_columns stay those of the change that opened it). -#}
{% macro history(table_name) -%}
    {{ return(adapter.dispatch('history', 'sqlserver_cdc')(table_name)) }}
{%- endmacro %}

{% macro spark__history(table_name) -%}
{%- set t = sqlserver_cdc._mart_table(sqlserver_cdc.tracked_table(table_name)) -%}
{{ config(materialized='cdc_mart', meta={'cdc_mart': 'history', 'cdc_table': table_name}) }}
{{ sqlserver_cdc._mart_dependencies(t, 'history') }}
{%- set non_key = sqlserver_cdc._non_key_columns(t) -%}
{%- set version_columns = t.key + non_key + ['valid_from_lsn', 'valid_from', 'operation', 'changed_columns', 'is_deleted'] -%}
{%- set out_columns = t.key + non_key + ['valid_from_lsn', 'valid_to_lsn', 'valid_from', 'valid_to', 'is_current', 'operation', 'changed_columns', 'is_deleted'] -%}
{%- set window = sqlserver_cdc._mart_window(t) -%}
{%- set recompute = sqlserver_cdc._recomputes_keys(t) -%}
{%- if window.empty %}
select {{ out_columns | join(', ') }} from {{ this }} where false
{%- else %}
with

window_transactions as (
    {{ sqlserver_cdc._transactions(t, window) | indent(4) }}
),

new_versions as (
    select
        {%- for c in t.key + non_key %}
        {{ c }},
        {%- endfor %}
        commit_lsn as valid_from_lsn,
        commit_time as valid_from,
        {{ sqlserver_cdc._operation_name('operation_code') }} as operation,
        case operation_code
            when 2 then array({% for c in t.columns | sort(attribute='ordinal') %}'{{ c.name }}'{{ ', ' if not loop.last }}{% endfor %})
            when 1 then cast(array() as array<string>)
            else {{ sqlserver_cdc._changed_columns_of('update_mask', t.columns) }}
        end as changed_columns,
        operation_code = 1 as is_deleted,
        1 as _priority
    from window_transactions
    where operation_code is not null
),

{%- if window.scoped %}

batch_keys as (
    select distinct {{ t.key | join(', ') }} from {{ 'window_transactions' if recompute else 'new_versions' }}
),

stored as (
    select stored.*
    from (
        select {{ sqlserver_cdc._stored_columns(this, t, t.key + non_key, window.evolve) }},
            {{ (out_columns | reject('in', t.key + non_key) | list) | join(', ') }}
        from {{ this }}
    ) as stored
    left semi join batch_keys
        on {{ sqlserver_cdc._key_match(t, 'stored', 'batch_keys') }}
),

{%- endif %}

recompute as (
    select {{ version_columns | join(', ') }}, _priority from new_versions
    {%- if window.scoped and not recompute %}
    union all
    -- the stored versions the window can change: still open, or closed inside the window
    select {% for c in version_columns %}stored.{{ c }}, {% endfor %}0 as _priority
    from stored
    where stored.valid_to_lsn is null or stored.valid_to_lsn > {{ sqlserver_cdc._at(window.lower, 'stored.source_database') }}
    {%- endif %}
),

deduplicated as (
    {%- if window.scoped and not recompute %}
    -- a stored version the window rebuilds comes once, as rebuilt
    select *
    from (
        select
            *,
            row_number() over (
                partition by {{ t.key | join(', ') }}, valid_from_lsn order by _priority desc
            ) as _rank
        from recompute
    )
    where _rank = 1
    {%- else %}
    -- one transaction per key and commit LSN: nothing to deduplicate
    select * from recompute
    {%- endif %}
),

{%- if t.history_columns is not none %}

{{ sqlserver_cdc._history_folded_versions(t) }},
{%- endif %}

validity as (
    select
        *,
        lead(valid_from_lsn) over (partition by {{ t.key | join(', ') }} order by valid_from_lsn) as valid_to_lsn,
        lead(valid_from) over (partition by {{ t.key | join(', ') }} order by valid_from_lsn) as valid_to
    from {{ 'versions' if t.history_columns is not none else 'deduplicated' }}
),

recomputed as (
    select
        {%- for c in t.key + non_key + ['valid_from_lsn', 'valid_to_lsn', 'valid_from', 'valid_to'] %}
        {{ c }},
        {%- endfor %}
        valid_to_lsn is null and not is_deleted as is_current,
        operation,
        changed_columns,
        is_deleted
    from validity
    where {{ sqlserver_cdc._mart_guard(t, 'history', {
            'key or valid_from_lsn has a NULL part': sqlserver_cdc._any_null(t.key + ['valid_from_lsn']),
            'key and valid_from_lsn duplicated': 'valid_to_lsn = valid_from_lsn'},
            t.key + ['valid_from_lsn']) }}
    {%- if not t.history_delete_versions %}
        and not is_deleted
    {%- endif %}
),

final as (
    select {{ out_columns | join(', ') }} from recomputed
    {%- if window.scoped and recompute %}
    union all
    -- a stored version of a touched key that the rebuild no longer has (a late event moved or
    -- removed it) is deleted by the MERGE
    select
        {%- for c in out_columns %}
        {{ 'stored.' ~ c if c in t.key + ['valid_from_lsn'] else 'null as ' ~ c }}{{ ',' if not loop.last }}
        {%- endfor %}
    from stored
    left anti join recomputed
        on {{ sqlserver_cdc._key_match(t, 'stored', 'recomputed') }}
        and stored.valid_from_lsn = recomputed.valid_from_lsn
    {%- endif %}
)

select * from final
{%- endif %}
{%- endmacro %}

{% macro default__history(table_name) -%}
    {{ exceptions.raise_compiler_error(sqlserver_cdc._not_supported('history')) }}
{%- endmacro %}

{#- The versions of a table that declares history_columns (see history), from `deduplicated`:
    `opening` (_opens 1 for a change that opens a version: a stored version, anything but an
    update, the first change after a delete or of a key, an update of one of those columns),
    `numbered` (_version) and `versions` (one row per key and _version: the latest values, and
    the opening change's valid_from_lsn, valid_from, operation, changed_columns and is_deleted).
    Three CTEs, ending without a comma. -#}
{% macro _history_folded_versions(t) -%}
{%- set non_key = sqlserver_cdc._non_key_columns(t) -%}
{%- set declared = t.columns | map(attribute='name') | list -%}
{%- set wanted = t.history_columns | map('lower') | list -%}
{%- set tracked = [] -%}
{%- for c in declared if c | lower in wanted %}{% do tracked.append(c) %}{% endfor -%}
opening as (
    select
        *,
        case
            when _priority = 0 or operation != 'update' or changed_columns is null then 1
            when coalesce(lag(is_deleted) over (partition by {{ t.key | join(', ') }} order by valid_from_lsn), true) then 1
            when arrays_overlap(changed_columns, array('{{ tracked | join("', '") }}')) then 1
            else 0
        end as _opens
    from deduplicated
),

numbered as (
    select
        *,
        sum(_opens) over (
            partition by {{ t.key | join(', ') }} order by valid_from_lsn rows between unbounded preceding and current row
        ) as _version
    from opening
),

versions as (
    select
        {%- for c in t.key %}
        {{ c }},
        {%- endfor %}
        {%- for c in non_key %}
        max_by({{ c }}, valid_from_lsn) as {{ c }},
        {%- endfor %}
        min(valid_from_lsn) as valid_from_lsn,
        min_by(valid_from, valid_from_lsn) as valid_from,
        min_by(operation, valid_from_lsn) as operation,
        min_by(changed_columns, valid_from_lsn) as changed_columns,
        min_by(is_deleted, valid_from_lsn) as is_deleted
    from numbered
    group by {{ t.key | join(', ') }}, _version
)
{%- endmacro %}
