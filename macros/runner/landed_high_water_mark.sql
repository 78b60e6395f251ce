{#- Used by begin_run to decide the run's window before models run, from the raw landing table
    (staging has not taken in the new batch yet): per channel of `channels`, over the landing
    batches after since_batch only (so only those are read: Delta skips earlier batches' files by
    their _batch_id statistics), the largest valid commit LSN landed (change tables:
    cdc.lsn_time_mapping.start_lsn; CES: the events' logicalid; Debezium: the events'
    source.commit_lsn). Rows: channel, upper_lsn. -#}
{% macro landed_high_water_mark(raw, since_batch='', channels=['change_tables', 'ces', 'debezium']) -%}
    {{ return(adapter.dispatch('landed_high_water_mark', 'sqlserver_cdc')(raw=raw, since_batch=since_batch, channels=channels)) }}
{%- endmacro %}

{% macro spark__landed_high_water_mark(raw, since_batch='', channels=['change_tables', 'ces', 'debezium']) -%}
    {%- set since = sqlserver_cdc._sql_string(since_batch) -%}
    {%- set selects = [] -%}
    {%- if 'change_tables' in channels -%}
        {%- do selects.append("select 'change_tables' as channel, max("
            ~ sqlserver_cdc.lsn_normalize("row_values['start_lsn']") ~ ") as upper_lsn from " ~ raw
            ~ " where landing_kind = 'cdc_metadata' and entity = 'lsn_time_mapping' and _batch_id > " ~ since) -%}
    {%- endif -%}
    {%- if 'ces' in channels -%}
        {%- do selects.append("select 'ces' as channel, max(upper(element_at(split(row_values['logicalid'], ':'), -2)))"
            ~ " filter (where row_values['logicalid'] rlike '" ~ sqlserver_cdc._ces_logicalid_pattern() ~ "') as upper_lsn from " ~ raw
            ~ " where landing_kind = 'ces' and _batch_id > " ~ since) -%}
    {%- endif -%}
    {%- if 'debezium' in channels -%}
        {%- do selects.append("select 'debezium' as channel, max(commit_lsn) filter (where status = 'complete') as upper_lsn from ("
            ~ sqlserver_cdc.debezium_events('(select * from ' ~ raw ~ ' where _batch_id > ' ~ since ~ ') as since_batch')
            ~ ") as landed_events") -%}
    {%- endif -%}
    {%- if not selects -%}
    select cast(null as string) as channel, cast(null as string) as upper_lsn where false
    {%- else -%}
    {{ selects | join('\nunion all\n') }}
    {%- endif -%}
{%- endmacro %}

{% macro default__landed_high_water_mark(raw, since_batch='', channels=['change_tables', 'ces', 'debezium']) -%}
    {{ exceptions.raise_compiler_error(sqlserver_cdc._not_supported('landed_high_water_mark')) }}
{%- endmacro %}
