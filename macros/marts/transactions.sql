{#- The intermediate model of a tracked table (int_<table>__transactions): its net changes per key
    and committed transaction in this run's window, computed once and read by both marts. A Delta
    table replaced on every run (one commit) with the rows: key columns, commit_lsn,
    operation_code (1 delete, 2 insert, 4 update: the transaction's net operation),
    update_mask (the OR of the transaction's masks, for updates), the other captured columns
    (the transaction's last values) and commit_time.
    The window covers what every mart of the table needs (see _transactions_window): from the
    lowest of their watermarks (the whole staged history on a first or full-refresh run) up to
    the run's bound for the table's channel; each mart then takes the part above its own
    watermark. Channels whose events arrive late (CES, Debezium) rebuild every transaction of each
    key touched by newly arrived events, from all its events; a touched key none of whose events
    nets to a change any more comes as one marker row (commit_lsn and operation_code NULL), which
    the marts turn into removals. -#}
{% macro transactions(table_name) -%}
    {{ return(adapter.dispatch('transactions', 'sqlserver_cdc')(table_name)) }}
{%- endmacro %}

{% macro default__transactions(table_name) -%}
{%- set t = sqlserver_cdc.tracked_table(table_name) -%}
{{ config(meta={'cdc_transactions': table_name}) }}
{%- set columns = t.columns | map(attribute='name') | list -%}
{%- set non_key = sqlserver_cdc._non_key_columns(t) -%}
{%- set out_columns = t.key + ['commit_lsn', 'operation_code', 'update_mask'] + non_key + ['commit_time'] -%}
{%- set window = sqlserver_cdc._transactions_window(t) -%}
{%- set recompute = sqlserver_cdc._recomputes_keys(t) -%}
{%- set scoped = window is not none and window.lower_lsn != '' -%}
{%- if not recompute %}
-- depends_on: {{ ref('stg_cdc_metadata__change_tables') }}
{%- endif %}
with
{%- if recompute %}

touched as (
    {{ sqlserver_cdc._mart_touched(t, window) }}
),
{%- endif %}

changes as (
    {{ sqlserver_cdc._mart_changes(t, window) }}
),

transactions as (
    select * from {{ sqlserver_cdc.net_changes('changes', t.key + ['commit_lsn'], columns, 'all with mask',
        extra_columns=['commit_time'], max_mask_bytes=((t.columns | length) + 7) // 8) }}
),

final as (
    select {{ out_columns | join(', ') }} from transactions
    {%- if recompute and scoped %}
    union all
    -- a touched key none of whose events nets to a change any more (an insert and its delete in
    -- one transaction, completed by a late event): the marts remove what they hold of it
    select
        {%- for c in out_columns %}
        {{ 'touched.' ~ c if c in t.key else 'null as ' ~ c }}{{ ',' if not loop.last }}
        {%- endfor %}
    from touched
    left anti join transactions
        on {{ sqlserver_cdc._key_match(t, 'touched', 'transactions') }}
    {%- endif %}
)

select * from final
{%- if window is not none and window.empty %}
-- nothing to do for any mart of the table: no change is read
where false
{%- endif %}
{%- endmacro %}

{#- The window of a run of int_<table>__transactions, decided at execution from the watermarks of
    the table's marts (the models with meta cdc_table = the table and cdc_mart) and the run's
    bound: {lower_lsn, upper_lsn, lower_batch, upper_batch, empty}. lower_lsn is the lowest of
    the marts' watermarks, '' (the whole staged history) when one of them is built in full: a
    --full-refresh run, a mart that does not exist yet, or one that never advanced. upper_lsn is
    none when nothing is mapped or landed yet. A change-table window that starts where cleanup
    has already removed changes fails with the gap, the missing range and the remedy. none at
    parse time. -#}
{% macro _transactions_window(t) -%}
    {%- if not execute -%}
        {{ return(none) }}
    {%- endif -%}
    {%- set marts = [] -%}
    {%- for node in graph.nodes.values() if node.resource_type == 'model'
        and node.config.meta.get('cdc_table') == t.name and node.config.meta.get('cdc_mart') -%}
        {%- do marts.append(node) -%}
    {%- endfor -%}
    {%- set ns = namespace(full=marts | length == 0) -%}
    {%- for node in marts -%}
        {%- set refresh = node.config.full_refresh if node.config.full_refresh is not none else flags.FULL_REFRESH -%}
        {%- set listed = run_query("show tables in " ~ node.schema ~ " like '" ~ node.alias ~ "'") -%}
        {%- if refresh or listed.rows | length == 0 -%}
            {%- set ns.full = true -%}
        {%- endif -%}
    {%- endfor -%}
    {%- set recompute = sqlserver_cdc._recomputes_keys(t) -%}
    {%- set names = marts | map(attribute='alias') | list -%}
    {%- set query -%}
        with marks as (
            select model_name, coalesce(max_by(watermark_lsn, recorded_at), '') as lsn,
                coalesce(max_by(watermark_batch, recorded_at), '') as batch
            from {{ sqlserver_cdc.watermark_relation() }}
            where model_name in ('{{ names | join("', '") }}')
            group by model_name
        ),

        bounds as (
            select
                {%- if ns.full %}
                '' as lower_lsn, '' as lower_batch,
                {%- else %}
                (select if(count(*) = {{ names | length }}, min(lsn), '') from marks) as lower_lsn,
                (select if(count(*) = {{ names | length }}, min(batch), '') from marks) as lower_batch,
                {%- endif %}
                {{ sqlserver_cdc.upper_lsn(t.channel) }} as upper_lsn,
                {{ sqlserver_cdc.upper_batch(t.channel) if recompute else 'cast(null as string)' }} as upper_batch,
                {{ 'cast(null as string)' if recompute else sqlserver_cdc.min_lsn(t.capture_instance) }} as available_lsn
        )

        select
            lower_lsn, upper_lsn, lower_batch, upper_batch,
            coalesce(lower_lsn >= upper_lsn, true)
                {%- if recompute %} and coalesce(lower_batch >= upper_batch, true){% endif %} as empty,
            lower_lsn != '' and {{ sqlserver_cdc.lsn_increment('lower_lsn') }} < coalesce(available_lsn, '') as gap,
            {{ sqlserver_cdc.lsn_increment('lower_lsn') }} as needed_lsn,
            available_lsn,
            {{ sqlserver_cdc.lsn_decrement('available_lsn') }} as removed_to_lsn
        from bounds
    {%- endset -%}
    {%- set row = run_query(query).rows[0] -%}
    {%- if row['gap'] -%}
        {{ exceptions.raise_compiler_error('gap detected for tracked table ' ~ t.name ~ ': its marts need changes from LSN '
            ~ row['needed_lsn'] ~ ' but capture instance ' ~ t.capture_instance ~ ' now starts at ' ~ row['available_lsn']
            ~ '; changes ' ~ row['needed_lsn'] ~ ' to ' ~ row['removed_to_lsn'] ~ ' were removed by cleanup before they'
            ~ ' were processed. Land a new snapshot and rebuild with: python -m runner run --full-refresh') }}
    {%- endif -%}
    {{ return({'lower_lsn': row['lower_lsn'], 'upper_lsn': row['upper_lsn'], 'lower_batch': row['lower_batch'],
        'upper_batch': row['upper_batch'], 'empty': row['empty']}) }}
{%- endmacro %}
