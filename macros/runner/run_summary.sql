{#- Used by the runner after a build: one row per tracked table with the rows landed and
    quarantined in this batch, the changes applied by this run (between the current-state mart's
    previous and new watermark), the LSN reached and how far its commit time lags the capture
    high-water mark (seconds), and the size of both marts. -#}
{% macro run_summary(batch_id, run_id) -%}
    {%- set mapping = ref('stg_cdc_metadata__lsn_time_mapping') -%}
    {%- set watermarks = sqlserver_cdc.watermark_relation() -%}
    {%- for name, table in var('cdc_tracked_tables', {}).items() %}
    select
        '{{ name }}' as tracked_table,
        count_if(s._batch_id = '{{ batch_id }}') as rows_landed,
        count_if(s._batch_id = '{{ batch_id }}' and s.quarantine_reason is not null) as quarantined,
        count_if(s.quarantine_reason is null and s.operation != 'update_before'
            and s.commit_lsn > w.before_lsn and s.commit_lsn <= w.after_lsn) as changes_applied,
        w.reached_lsn as lsn_reached,
        w.after_lsn is not null as advanced,
        cast(unix_timestamp(max(hwm.commit_time)) - unix_timestamp(max(reached.tran_end_time)) as bigint)
            as lag_seconds,
        (select count(*) from {{ ref(name ~ '_current') }}) as current_rows,
        (select count(*) from {{ ref(name ~ '_history') }}) as history_versions
    from (
        select
            before_lsn,
            after_lsn,
            coalesce(after_lsn, nullif(before_lsn, '')) as reached_lsn
        from (
            select
                coalesce(max_by(watermark_lsn, recorded_at) filter (where invocation_id != '{{ run_id }}'), '')
                    as before_lsn,
                max_by(watermark_lsn, recorded_at) filter (where invocation_id = '{{ run_id }}') as after_lsn
            from {{ watermarks }}
            where model_name = '{{ name }}_current'
        )
    ) as w
    cross join (
        select max(tran_end_time) as commit_time from {{ mapping }} where quarantine_reason is null
    ) as hwm
    left join {{ mapping }} as reached
        on reached.start_lsn = w.reached_lsn and reached.quarantine_reason is null
    left join {{ ref('stg_' ~ table.channel ~ '__' ~ name) }} as s
        on true
    group by w.before_lsn, w.after_lsn, w.reached_lsn
    {{ 'union all' if not loop.last }}
    {%- endfor %}
{%- endmacro %}
