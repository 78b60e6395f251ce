-- Change Event Streaming: landed CloudEvent lines, de-duplicated by source + id, split
-- messages reassembled by logicalid in segment order (whatever the index base), and the data
-- document's envelope parsed. One row per complete event (status 'complete', _batch_id = the
-- batch that completed it), plus one row per landed line: a segment of a complete event
-- ('assembled'), a duplicate ('duplicate'), a segment waiting for the rest of its message
-- ('pending') or a line that cannot be trusted ('quarantined', with the reason and the raw line).
-- A Delta table merged per landing batch: each build reads only the lines of the landing batches
-- its window takes in, plus the pending lines (a MERGE settles them: assembled or quarantined
-- when their message completes or is orphaned) and an orphan's segments when more of its message
-- lands; lines already staged are looked up by id and segment, so a redelivery in a later batch
-- is still a duplicate. The logic is the macro ces_events; this model computes what an
-- incremental build looks up and calls it.
-- sqlfluff reads struct field access (doc.eventsource.tbl) as a table-qualified reference:
-- noqa: disable=RF03
-- Built only when a tracked table declares channel ces (nothing to route events to otherwise).
{{ config(enabled=sqlserver_cdc.channel_declared('ces')) }}
{{ sqlserver_cdc._staged_table_config(
    unique_key='row_key', incremental_predicates=["DBT_INTERNAL_DEST.status in ('pending', 'quarantined')"]) }}
{%- set orphan_after = var('cdc_ces_orphan_after_batches', 3) | int %}
{%- set window = sqlserver_cdc.cdc_window() %}
{%- set new_lines = sqlserver_cdc._landed_since("landing_kind = 'ces'") %}
{%- set logicalid_pattern = sqlserver_cdc._ces_logicalid_pattern() %}
{#- what an incremental build looks up among the staged rows, as literals so Delta skips other
    files: lines and settled messages at or above the smallest logicalid LSN of the new lines
    (a redelivery repeats its logicalid), pending lines and CES batches from the first landing
    batch whose pending messages can still wait (see _ces_waiting_from) -#}
{%- set lsn_floor, waiting_from = none, '' %}
{%- if execute and not window.full %}
    {%- set lsn_floor = run_query("select min(upper(element_at(split(row_values['logicalid'], ':'), -2))) from ("
        ~ new_lines ~ ") as new_lines where row_values['logicalid'] rlike '" ~ logicalid_pattern ~ "'").columns[0].values()[0] %}
    {%- set waiting_from = sqlserver_cdc._ces_waiting_from(window, orphan_after) %}
{%- endif %}
{%- set staged_lsns = "commit_lsn >= '" ~ lsn_floor ~ "'" if lsn_floor is not none else 'false' %}
{{ sqlserver_cdc.ces_events(new_lines, prior=this if not window.full else none, staged_lsns=staged_lsns,
    waiting_from=waiting_from, orphan_after=orphan_after) }}
