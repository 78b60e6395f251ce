{#- Used by finish_run (the on-run-end hook of a runner's build): one row per tracked table with
    the rows landed and quarantined in the batches this run took in (after since_batch, up to
    run_batch: a batch whose run was killed counts in the run that finally applies it), the
    changes applied by this run (change tables: between the current-state mart's previous and
    new watermark; CES, Debezium: the events this run took in), the LSN reached and (change
    tables) how far its commit time lags the capture high-water mark (seconds), and the size of
    both marts. Relations are looked up in the graph (hooks have no ref). -#}
{% macro run_summary(since_batch, run_batch, run_id) -%}
    {%- set mapping = sqlserver_cdc._model_relation('stg_cdc_metadata__lsn_time_mapping') -%}
    {%- set batches = "_batch_id > '" ~ since_batch ~ "' and _batch_id <= '" ~ run_batch ~ "'" -%}
    {%- set watermarks = sqlserver_cdc.watermark_relation() -%}
    {%- for name, table in var('cdc_tracked_tables', {}).items() %}
    select
        '{{ name }}' as tracked_table,
        landed.rows_landed,
        landed.quarantined,
        applied.changes_applied,
        w.reached_lsn as lsn_reached,
        w.after_lsn is not null as advanced,
        {%- if table.channel == 'change_tables' %}
        cast(unix_timestamp(hwm.commit_time) - unix_timestamp(reached.tran_end_time) as bigint) as lag_seconds,
        {%- else %}
        cast(null as bigint) as lag_seconds,
        {%- endif %}
        (select count(*) from {{ sqlserver_cdc._model_relation(name ~ '_current') }}) as current_rows,
        (select count(*) from {{ sqlserver_cdc._model_relation(name ~ '_history') }}) as history_versions
    from (
        select
            before_lsn,
            after_lsn,
            coalesce(after_lsn, nullif(before_lsn, '')) as reached_lsn
        from ({{ sqlserver_cdc._summary_watermarks(watermarks, name, run_id) }})
    ) as w
    cross join (
        select max(tran_end_time) as commit_time from {{ mapping }} where quarantine_reason is null
    ) as hwm
    -- the batches' rows only: Delta skips the staged files of other batches
    cross join (
        select count(*) as rows_landed, count_if(quarantine_reason is not null) as quarantined
        from {{ sqlserver_cdc._model_relation('stg_' ~ table.channel ~ '__' ~ name) }}
        where {{ batches }}
    ) as landed
    cross join (
        select count(*) as changes_applied
        from {{ sqlserver_cdc._model_relation('stg_' ~ table.channel ~ '__' ~ name) }} as s
        cross join ({{ sqlserver_cdc._summary_watermarks(watermarks, name, run_id) }}) as bounds
        {%- if table.channel == 'change_tables' %}
        where s.commit_lsn > bounds.before_lsn and s.commit_lsn <= bounds.after_lsn
            and s.quarantine_reason is null and s.operation != 'update_before'
        {%- else %}
        -- events arrive out of order: those this run took in, whatever their LSN
        where s._batch_id > bounds.before_batch and s._batch_id <= bounds.after_batch
            and s.commit_lsn <= bounds.after_lsn and s.quarantine_reason is null
        {%- endif %}
    ) as applied
    left join {{ mapping }} as reached
        on reached.start_lsn = w.reached_lsn and reached.quarantine_reason is null
    {{ 'union all' if not loop.last }}
    {%- endfor %}
{%- endmacro %}

{#- The current-state mart's watermark before this run and the one this run recorded (NULL if it
    did not advance). -#}
{% macro _summary_watermarks(watermarks, name, run_id) -%}
    select
        coalesce(max_by(watermark_lsn, recorded_at) filter (where invocation_id != '{{ run_id }}'), '') as before_lsn,
        max_by(watermark_lsn, recorded_at) filter (where invocation_id = '{{ run_id }}') as after_lsn,
        coalesce(max_by(watermark_batch, recorded_at) filter (where invocation_id != '{{ run_id }}'), '') as before_batch,
        max_by(watermark_batch, recorded_at) filter (where invocation_id = '{{ run_id }}') as after_batch
    from {{ watermarks }}
    where model_name = '{{ name }}_current'
{%- endmacro %}

{#- Used by finish_run for each declared event channel (ces, debezium): lines landed in the
    batches this run took in (after since_batch, up to run_batch), how many of them were
    duplicates (CES: redelivered events and segments; Debezium: replayed events), split messages
    still waiting for segments (CES), tombstones (Debezium), and lines quarantined (in those
    batches, and in all: an incomplete CES message becomes an orphan batches after landing). -#}
{% macro stream_summary(channel, since_batch, run_batch) -%}
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

{#- A model's relation by name, from the graph (hooks have no ref). -#}
{% macro _model_relation(name) -%}
    {%- set node = graph.nodes.values() | selectattr('resource_type', 'equalto', 'model')
        | selectattr('name', 'equalto', name) | first -%}
    {%- if node is not defined or node is none -%}
        {{ exceptions.raise_compiler_error("model " ~ name ~ " is not in the project") }}
    {%- endif -%}
    {{ return(node.relation_name) }}
{%- endmacro %}
