{#- on-run-end hook: records the run's upper LSN as the watermark of every mart (model with
    meta cdc_mart) that succeeded in this invocation and none of whose tests failed or errored.
    A mart that failed, was skipped or has a failing test keeps its watermark, so its next run
    reprocesses the same changes (marts are idempotent over a window). -#}
{% macro advance_watermarks(results) -%}
    {{ return(adapter.dispatch('advance_watermarks', 'sqlserver_cdc')(results)) }}
{%- endmacro %}

{% macro spark__advance_watermarks(results) -%}
    {%- set blocked = [] -%}
    {%- for r in results if r.node.resource_type == 'test' and r.status in ('fail', 'error') -%}
        {%- for n in r.node.depends_on.nodes -%}{%- do blocked.append(n) -%}{%- endfor -%}
    {%- endfor -%}
    {%- set advanced = [] -%}
    {%- for r in results if r.node.resource_type == 'model' and r.status == 'success'
        and r.node.config.meta.get('cdc_mart') and r.node.unique_id not in blocked -%}
        {%- do advanced.append(r.node) -%}
    {%- endfor -%}
    {%- if advanced -%}
        {%- set tables = var('cdc_tracked_tables', {}) -%}
    insert into {{ sqlserver_cdc.watermark_relation() }} (model_name, watermark_lsn, invocation_id, recorded_at, watermark_batch)
    {%- for node in advanced %}
        {%- set channel = tables.get(node.config.meta.get('cdc_table'), {}).get('channel', 'change_tables') %}
    select
        '{{ node.name }}',
        {{ sqlserver_cdc._upper_lsn_for_hook(channel) }},
        '{{ var("cdc_run_id", invocation_id) }}',
        current_timestamp(),
        {{ sqlserver_cdc.upper_batch(channel) if channel != 'change_tables' else 'cast(null as string)' }}
    {{ 'union all' if not loop.last }}
    {%- endfor %}
    {%- else %}
    select 1
    {%- endif -%}
{%- endmacro %}

{% macro default__advance_watermarks(results) -%}
    {{ exceptions.raise_compiler_error(sqlserver_cdc._not_supported('advance_watermarks')) }}
{%- endmacro %}

{#- upper_lsn for the on-run-end hook, where ref() is not available: the staging relations are
    looked up in the graph. -#}
{% macro _upper_lsn_for_hook(channel) -%}
    {%- set value = var('cdc_upper_lsn', none) -%}
    {%- if value is mapping -%}{%- set value = value.get(channel) -%}{%- endif -%}
    {%- if var('cdc_runner', false) -%}
    {{ sqlserver_cdc._ledger_bound('upper_lsn', channel) }}
    {%- elif value is not none -%}
    '{{ value }}'
    {%- elif channel == 'change_tables' -%}
        {%- set mapping = graph.nodes.values() | selectattr('name', 'equalto', 'stg_cdc_metadata__lsn_time_mapping') | first -%}
    {{ sqlserver_cdc._capped_by_export_cut('(select max(start_lsn) from ' ~ mapping.relation_name ~ ' where quarantine_reason is null)') }}
    {%- else -%}
    ({{ sqlserver_cdc._landed_upper_lsn(channel) }})
    {%- endif -%}
{%- endmacro %}
