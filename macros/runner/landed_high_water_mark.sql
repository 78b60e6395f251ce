{#- Used by the runner to fix the run's bounds before models run, read from the raw landing
    table (the staging views may not exist yet on a first run): per channel the largest valid
    commit LSN landed (change tables: cdc.lsn_time_mapping; CES: the events' logicalid; Debezium:
    the events' source.commit_lsn), and the last landing batch of each event channel. -#}
{% macro landed_high_water_mark() -%}
    select
        'change_tables' as channel,
        max({{ sqlserver_cdc.lsn_normalize("row_values['start_lsn']") }}) as upper_lsn,
        cast(null as string) as upper_batch
    from {{ source('cdc_raw', 'landed_rows') }}
    where landing_kind = 'cdc_metadata' and entity = 'lsn_time_mapping'
    {%- for channel in ['ces', 'debezium'] %}
    union all
    select
        '{{ channel }}' as channel,
        ({{ sqlserver_cdc._landed_upper_lsn(channel) }}) as upper_lsn,
        {{ sqlserver_cdc.upper_batch(channel) }} as upper_batch
    {%- endfor %}
{%- endmacro %}
