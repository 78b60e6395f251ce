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
    {%- if recompute %}
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
{%- if window.empty %}
-- nothing to do for any mart of the table: no change is read
where false
{%- endif %}
{%- endmacro %}

{#- The window of a run of int_<table>__transactions as SQL expressions: {lower, upper,
    lower_batch, upper_batch, scoped, empty}, decided from the watermarks of the table's marts
    (the models with meta cdc_table = the table and cdc_mart) and the run's bound.
    - Scoped (every mart exists, has a watermark and is built incrementally): lower is the lowest
      of the marts' watermarks and every bound a literal, read once at execution, so Delta skips
      the staged files outside them; empty when no mart has anything to take in. A change-table
      window that starts where cleanup has already removed changes fails with the gap, the
      missing range and the remedy.
    - Otherwise (a --full-refresh run, a mart that does not exist yet or never advanced) the
      whole staged history up to the run's bound, which stays a subquery.
    Only `dbt run`/`build` (and `retry`) read the warehouse here, when the model executes: `dbt
    compile`, `dbt docs generate` and the linter render the whole-history form and need no
    connection (house style: bounds reach models as subqueries or literals read at execution).
    At parse time: lower '', upper NULL (the SQL is rendered only for its refs). -#}
{% macro _transactions_window(t) -%}
    {%- set recompute = sqlserver_cdc._recomputes_keys(t) -%}
    {%- set whole = {'lower': "''", 'lower_batch': "''", 'scoped': false, 'empty': false,
        'upper': sqlserver_cdc.upper_lsn(t.channel) if execute else 'cast(null as string)',
        'upper_batch': sqlserver_cdc.upper_batch(t.channel) if execute and recompute else 'cast(null as string)'} -%}
    {%- if not execute or flags.WHICH not in ('run', 'build', 'retry') -%}
        {{ return(whole) }}
    {%- endif -%}
    {%- set marts = [] -%}
    {%- for node in graph.nodes.values() if node.resource_type == 'model'
        and node.config.meta.get('cdc_table') == t.name and node.config.meta.get('cdc_mart') -%}
        {%- set refresh = node.config.full_refresh if node.config.full_refresh is not none else flags.FULL_REFRESH -%}
        {%- if refresh or adapter.get_relation(database=node.database, schema=node.schema, identifier=node.alias) is none -%}
            {{ return(whole) }}
        {%- endif -%}
        {%- do marts.append(node.alias) -%}
    {%- endfor -%}
    {%- if not marts -%}
        {{ return(whole) }}
    {%- endif -%}
    {%- set query -%}
        select
            lower_lsn, upper_lsn, lower_batch, upper_batch,
            coalesce(lower_lsn >= upper_lsn, true)
                {%- if recompute %} and coalesce(lower_batch >= upper_batch, true){% endif %} as empty,
            lower_lsn != '' and {{ sqlserver_cdc.lsn_increment('lower_lsn') }} < coalesce(available_lsn, '') as gap,
            {{ sqlserver_cdc.lsn_increment('lower_lsn') }} as needed_lsn,
            available_lsn,
            {{ sqlserver_cdc.lsn_decrement('available_lsn') }} as removed_to_lsn
        from (
            -- the marts' latest watermarks: '' unless each of them has one
            select
                if(count(*) = {{ marts | length }}, min(lsn), '') as lower_lsn,
                if(count(*) = {{ marts | length }}, min(batch), '') as lower_batch
            from (
                select coalesce(max_by(watermark_lsn, recorded_at), '') as lsn,
                    coalesce(max_by(watermark_batch, recorded_at), '') as batch
                from {{ sqlserver_cdc.watermark_relation() }}
                where model_name in ('{{ marts | join("', '") }}')
                group by model_name
            )
        ) as marks
        cross join (
            select
                {{ whole.upper }} as upper_lsn,
                {{ whole.upper_batch }} as upper_batch,
                {{ 'cast(null as string)' if recompute else sqlserver_cdc.min_lsn(t.capture_instance) }} as available_lsn
        ) as bounds
    {%- endset -%}
    {%- set row = run_query(query).rows[0] -%}
    {%- if row['gap'] -%}
        {{ exceptions.raise_compiler_error('gap detected for tracked table ' ~ t.name ~ ': its marts need changes from LSN '
            ~ row['needed_lsn'] ~ ' but capture instance ' ~ t.capture_instance ~ ' now starts at ' ~ row['available_lsn']
            ~ '; changes ' ~ row['needed_lsn'] ~ ' to ' ~ row['removed_to_lsn'] ~ ' were removed by cleanup before they'
            ~ ' were processed. Land a new snapshot and rebuild with: python -m runner run --full-refresh') }}
    {%- endif -%}
    {%- set literal = sqlserver_cdc._window_literal -%}
    {{ return({'lower': literal(row['lower_lsn']), 'upper': literal(row['upper_lsn']),
        'lower_batch': literal(row['lower_batch']), 'upper_batch': literal(row['upper_batch']),
        'scoped': row['lower_lsn'] != '', 'empty': row['empty']}) }}
{%- endmacro %}
