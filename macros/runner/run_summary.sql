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
        counts.rows_landed,
        counts.quarantined,
        counts.changes_applied,
        coalesce(w.after_lsn, nullif(w.before_lsn, '')) as lsn_reached,
        w.after_lsn is not null as advanced,
        cast(unix_timestamp(hwm.commit_time) - unix_timestamp(reached.commit_time) as bigint) as lag_seconds,
        (select count(*) from {{ ref(name ~ '_current') }}) as current_rows,
        (select count(*) from {{ ref(name ~ '_history') }}) as history_versions
    from (
        select
            coalesce(max_by(watermark_lsn, recorded_at) filter (where invocation_id != '{{ run_id }}'), '') as before_lsn,
            max_by(watermark_lsn, recorded_at) filter (where invocation_id = '{{ run_id }}') as after_lsn
        from {{ watermarks }}
        where model_name = '{{ name }}_current'
    ) as w
    cross join (
        select max(tran_end_time) as commit_time from {{ mapping }} where quarantine_reason is null
    ) as hwm
    cross join (
        select max(m.tran_end_time) as commit_time
        from {{ mapping }} as m
        where m.quarantine_reason is null
            and m.start_lsn <= (
                select coalesce(max_by(watermark_lsn, recorded_at), '') from {{ watermarks }}
                where model_name = '{{ name }}_current'
            )
    ) as reached
    cross join (
        select
            count_if(s._batch_id = '{{ batch_id }}') as rows_landed,
            count_if(s._batch_id = '{{ batch_id }}' and s.quarantine_reason is not null) as quarantined,
            count_if(s.quarantine_reason is null and s.operation != 'update_before'
                and s.commit_lsn > w2.before_lsn and s.commit_lsn <= w2.after_lsn) as changes_applied
        from {{ ref('stg_' ~ table.channel ~ '__' ~ name) }} as s
        cross join (
            select
                coalesce(max_by(watermark_lsn, recorded_at) filter (where invocation_id != '{{ run_id }}'), '') as before_lsn,
                max_by(watermark_lsn, recorded_at) filter (where invocation_id = '{{ run_id }}') as after_lsn
            from {{ watermarks }}
            where model_name = '{{ name }}_current'
        ) as w2
    ) as counts
    {{ 'union all' if not loop.last }}
    {%- endfor %}
{%- endmacro %}
