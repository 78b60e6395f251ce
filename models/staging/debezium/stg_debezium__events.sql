-- Debezium SQL Server connector events: every landed line, unwrapped (Kafka record, schema
-- envelope, Avro-JSON unions), de-duplicated (replays, also against the events already staged),
-- tombstones counted, bad lines quarantined. The logic is the macro debezium_events, which the
-- runner's begin_run reads too. A Delta table appended per landing batch: each line is decoded
-- once; a replay is looked up among the staged events at or above the smallest commit LSN of
-- the new lines (a literal: Delta skips older files). A runner's plan gives that floor when its
-- facts read it (the window's lower_lsn: runner/run/plan.py _replay_floor); otherwise it is queried.
-- Built only when a tracked table declares channel debezium.
{{ config(enabled=sqlserver_cdc.channel_declared('debezium')) }}
{{ sqlserver_cdc._staged_table_config() }}
{%- set window = sqlserver_cdc.cdc_window() %}
{%- set new_lines = '(' ~ sqlserver_cdc._landed_since("landing_kind = 'debezium'") ~ ') as new_lines' %}
{%- set floor = window.lower_lsn or none %}
{%- if execute and not window.full and floor is none %}
    {%- set floor = run_query('select min(commit_lsn) from (' ~ sqlserver_cdc.debezium_events(new_lines, deduplicate=false)
        ~ ") as new_events where status = 'complete'").columns[0].values()[0] %}
{%- endif %}
{{ sqlserver_cdc.debezium_events(new_lines, prior=this if floor is not none else none, prior_floor=floor) }}
