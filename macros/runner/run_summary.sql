{#- Used by finish_run (the on-run-end hook of a runner's build): one row per tracked table with
    the rows landed and quarantined in the batches this run took in (after since_batch, up to
    run_batch: a batch whose run was killed counts in the run that finally applies it), the
    changes applied by this run (change tables: between the current-state mart's previous and
    new watermark; CES, Debezium: the events this run took in), the LSN reached and (change
    tables) how far its commit time lags the capture high-water mark (seconds), and the size of
    both marts. Relations are looked up in the graph (hooks have no ref). -#}
{% macro run_summary(since_batch, run_batch, run_id, capture_lsn=none) -%}
    {{ return(adapter.dispatch('run_summary', 'sqlserver_cdc')(since_batch=since_batch, run_batch=run_batch, run_id=run_id, capture_lsn=capture_lsn)) }}
{%- endmacro %}

{% macro spark__run_summary(since_batch, run_batch, run_id, capture_lsn=none) -%}
    {%- set mapping = sqlserver_cdc._model_relation('stg_cdc_metadata__lsn_time_mapping') -%}
    {%- set batches = "_batch_id > '" ~ since_batch ~ "' and _batch_id <= '" ~ run_batch ~ "'" -%}
    {%- set watermarks = sqlserver_cdc.watermark_relation() -%}
    {#- each mart's watermarks as literals, so Delta skips the staged files outside them -#}
    {%- set marks = {} -%}
    {%- if execute -%}
        {%- for row in run_query(sqlserver_cdc._summary_watermarks(watermarks, run_id)) -%}
            {%- do marks.update({row[0]: row}) -%}
        {%- endfor -%}
    {%- endif -%}
    {%- for name, table in var('cdc_tracked_tables', {}).items() %}
    {%- set m = marks.get(name ~ '_current') or [none, '', none, '', none] %}
    {%- set before_lsn, after_lsn, before_batch, after_batch = m[1] or '', m[2], m[3] or '', m[4] %}
    select
        '{{ name }}' as tracked_table,
        landed.rows_landed,
        landed.quarantined,
        applied.changes_applied,
        {{ sqlserver_cdc._sql_string(after_lsn or before_lsn) if (after_lsn or before_lsn) else 'cast(null as string)' }} as lsn_reached,
        {{ 'true' if after_lsn else 'false' }} as advanced,
        {%- if table.channel == 'change_tables' and capture_lsn and (after_lsn or before_lsn) %}
        cast(unix_timestamp((select max(tran_end_time) from {{ mapping }}
            where start_lsn = '{{ capture_lsn }}' and quarantine_reason is null))
            - unix_timestamp((select max(tran_end_time) from {{ mapping }}
            where start_lsn = '{{ after_lsn or before_lsn }}' and quarantine_reason is null)) as bigint) as lag_seconds,
        {%- else %}
        cast(null as bigint) as lag_seconds,
        {%- endif %}
        {{ sqlserver_cdc._summary_count(name ~ '_current') }} as current_rows,
        {{ sqlserver_cdc._summary_count(name ~ '_history') }} as history_versions
    -- the batches' rows only: Delta skips the staged files of other batches
    from (
        {%- if not sqlserver_cdc._model_exists('stg_' ~ table.channel ~ '__' ~ name) %}
        -- a first run that failed before staging the table
        select cast(0 as bigint) as rows_landed, cast(0 as bigint) as quarantined
        {%- else %}
        select count(*) as rows_landed, count_if(quarantine_reason is not null) as quarantined
        from {{ sqlserver_cdc._model_relation('stg_' ~ table.channel ~ '__' ~ name) }}
        where {{ batches }}
        {%- endif %}
    ) as landed
    cross join (
        select count(*) as changes_applied
        from {{ sqlserver_cdc._model_relation('stg_' ~ table.channel ~ '__' ~ name) }}
        {%- if not after_lsn %}
        where false
        {%- elif table.channel == 'change_tables' %}
        where commit_lsn > '{{ before_lsn }}' and commit_lsn <= '{{ after_lsn }}'
            and quarantine_reason is null and operation != 'update_before'
        {%- else %}
        -- events arrive out of order: those this run took in, whatever their LSN
        where _batch_id > '{{ before_batch }}' and _batch_id <= '{{ after_batch }}'
            and commit_lsn <= '{{ after_lsn }}' and quarantine_reason is null
        {%- endif %}
    ) as applied
    {{ 'union all' if not loop.last }}
    {%- endfor %}
{%- endmacro %}

{% macro default__run_summary(since_batch, run_batch, run_id, capture_lsn=none) -%}
    {{ exceptions.raise_compiler_error(sqlserver_cdc._not_supported('run_summary')) }}
{%- endmacro %}

{#- Each mart's watermark before this run and the one this run recorded (NULL if it did not
    advance), with the landing batches: model_name, before_lsn, after_lsn, before_batch,
    after_batch. -#}
{% macro _summary_watermarks(watermarks, run_id) -%}
    select
        model_name,
        max_by(watermark_lsn, recorded_at) filter (where invocation_id != '{{ run_id }}') as before_lsn,
        max_by(watermark_lsn, recorded_at) filter (where invocation_id = '{{ run_id }}') as after_lsn,
        max_by(watermark_batch, recorded_at) filter (where invocation_id != '{{ run_id }}') as before_batch,
        max_by(watermark_batch, recorded_at) filter (where invocation_id = '{{ run_id }}') as after_batch
    from {{ watermarks }}
    group by model_name
{%- endmacro %}

{#- Used by finish_run for each declared event channel (ces, debezium): lines landed in the
    batches this run took in (after since_batch, up to run_batch), how many of them were
    duplicates (CES: redelivered events and segments; Debezium: replayed events), split messages
    still waiting for segments (CES), tombstones (Debezium), and lines quarantined (in those
    batches, and in all: an incomplete CES message becomes an orphan batches after landing). -#}
{% macro stream_summary(channel, since_batch, run_batch) -%}
    {{ return(adapter.dispatch('stream_summary', 'sqlserver_cdc')(channel=channel, since_batch=since_batch, run_batch=run_batch)) }}
{%- endmacro %}

{% macro spark__stream_summary(channel, since_batch, run_batch) -%}
    {%- if channel not in ('ces', 'debezium') -%}
        {{ exceptions.raise_compiler_error("stream_summary: channel must be ces or debezium; got '" ~ channel ~ "'") }}
    {%- endif %}
    {%- set batches = "_batch_id > '" ~ since_batch ~ "' and _batch_id <= '" ~ run_batch ~ "'" %}
    select
        (select count(*) from {{ sqlserver_cdc._raw_landed_rows() }}
            where landing_kind = '{{ channel }}' and {{ batches }}) as lines_landed,
        count_if({{ batches }} and status = 'duplicate') as duplicates,
        {%- if channel == 'ces' %}
        count(distinct case when status = 'pending' then logicalid end) as pending_messages,
        0 as tombstones,
        {%- else %}
        0 as pending_messages,
        count_if({{ batches }} and status = 'tombstone') as tombstones,
        {%- endif %}
        count_if({{ batches }} and status = 'quarantined') as quarantined,
        count_if(status = 'quarantined') as quarantined_total
    from {{ sqlserver_cdc._model_relation('stg_' ~ channel ~ '__events') }}
{%- endmacro %}

{% macro default__stream_summary(channel, since_batch, run_batch) -%}
    {{ exceptions.raise_compiler_error(sqlserver_cdc._not_supported('stream_summary')) }}
{%- endmacro %}

{#- A model's relation by name, from the graph (hooks have no ref). -#}
{#- The row count of a model as a scalar subquery, 0 when its table does not exist (a first run
    that failed before creating it). -#}
{% macro _summary_count(name) -%}
    {%- if sqlserver_cdc._model_exists(name) -%}
    (select count(*) from {{ sqlserver_cdc._model_relation(name) }})
    {%- else -%}
    cast(0 as bigint)
    {%- endif -%}
{%- endmacro %}

{#- Whether a model's relation exists (SHOW TABLES reads the metastore only). -#}
{% macro _model_exists(name) -%}
    {%- set node = graph.nodes.values() | selectattr('resource_type', 'equalto', 'model')
        | selectattr('name', 'equalto', name) | first -%}
    {%- if not execute or node is not defined or node is none -%}
        {{ return(true) }}
    {%- endif -%}
    {{ return(run_query("show tables in " ~ node.schema ~ " like '" ~ node.alias ~ "'").rows | length > 0) }}
{%- endmacro %}

{% macro _model_relation(name) -%}
    {%- set node = graph.nodes.values() | selectattr('resource_type', 'equalto', 'model')
        | selectattr('name', 'equalto', name) | first -%}
    {%- if node is not defined or node is none -%}
        {{ exceptions.raise_compiler_error("model " ~ name ~ " is not in the project") }}
    {%- endif -%}
    {{ return(node.relation_name) }}
{%- endmacro %}
