{#- on-run-end hook: records the run's upper LSN as the watermark of every mart (model with
    meta cdc_mart) that succeeded in this invocation and none of whose tests failed or errored.
    A mart that failed, was skipped or has a failing test keeps its watermark, so its next run
    reprocesses the same changes (marts are idempotent over a window). -#}
{% macro advance_watermarks(results) -%}
    {{ return(adapter.dispatch('advance_watermarks', 'sqlserver_cdc')(results)) }}
{%- endmacro %}

{% macro default__advance_watermarks(results) -%}
    {%- set blocked = [] -%}
    {%- for r in results if r.node.resource_type == 'test' and r.status in ('fail', 'error') -%}
        {%- for n in r.node.depends_on.nodes -%}{%- do blocked.append(n) -%}{%- endfor -%}
    {%- endfor -%}
    {%- set advanced = [] -%}
    {%- for r in results if r.node.resource_type == 'model' and r.status == 'success'
        and r.node.config.meta.get('cdc_mart') and r.node.unique_id not in blocked -%}
        {%- do advanced.append(r.node.name) -%}
    {%- endfor -%}
    {%- if advanced -%}
        {%- set value = var('cdc_upper_lsn', none) -%}
        {%- if value is none -%}
            {%- set mapping = graph.nodes.values() | selectattr('name', 'equalto', 'stg_cdc_metadata__lsn_time_mapping') | first -%}
            {%- set value_sql = '(select max(start_lsn) from ' ~ mapping.relation_name ~ ' where quarantine_reason is null)' -%}
        {%- else -%}
            {%- set value_sql = "'" ~ value ~ "'" -%}
        {%- endif %}
    insert into {{ sqlserver_cdc.watermark_relation() }}
    select model_name, {{ value_sql }}, '{{ var("cdc_run_id", invocation_id) }}', current_timestamp()
    from (values {% for m in advanced %}('{{ m }}'){{ ', ' if not loop.last }}{% endfor %}) as advanced (model_name)
    {%- else %}
    select 1
    {%- endif -%}
{%- endmacro %}
