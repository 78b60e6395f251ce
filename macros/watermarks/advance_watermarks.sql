{#- on-run-end hook of a plain dbt build (a runner's build records its watermarks itself, see
    finish_run): records, for every model with a window (a tracked table's staging or mart) that
    succeeded in this invocation and none of whose tests failed or errored, how far it got: a
    mart its window's upper LSN and batch, a staging model the last batch it holds. A model that
    failed, was skipped or has a failing test keeps its watermark, so the next build reprocesses
    the same changes (the marts are idempotent over a window). -#}
{% macro advance_watermarks(results) -%}
    {{ return(adapter.dispatch('advance_watermarks', 'sqlserver_cdc')(results)) }}
{%- endmacro %}

{% macro spark__advance_watermarks(results) -%}
    {%- if var('cdc_plan', none) is not none -%}
    select 1
    {%- else -%}
    {%- set blocked = [] -%}
    {%- for r in results if r.node.resource_type == 'test' and r.status in ('fail', 'error') -%}
        {%- for n in r.node.depends_on.nodes -%}{%- do blocked.append(n) -%}{%- endfor -%}
    {%- endfor -%}
    {%- set rows = [] -%}
    {%- for r in results if r.node.resource_type == 'model' and r.status == 'success' and r.node.unique_id not in blocked
        and r.node.config.materialized in ('cdc_mart', 'cdc_staging') -%}
        {%- set window = sqlserver_cdc.cdc_window(r.node.name) if r.node.config.materialized == 'cdc_mart' else none -%}
        {%- if window is not none -%}
            {%- do rows.append("select '" ~ r.node.name ~ "', " ~ sqlserver_cdc._sql_value(window.upper_lsn, 'string') ~ ", "
                ~ sqlserver_cdc._sql_value(window.upper_batch, 'string')) -%}
        {%- else -%}
            {%- do rows.append("select '" ~ r.node.name ~ "', cast(null as string), (select max(_batch_id) from " ~ r.node.relation_name ~ ")") -%}
        {%- endif -%}
    {%- endfor -%}
    {%- if rows %}
    insert into {{ sqlserver_cdc.watermark_relation() }} (model_name, watermark_lsn, invocation_id, recorded_at, watermark_batch, declaration)
    select model_name, watermark_lsn, '{{ invocation_id }}', current_timestamp(), watermark_batch, cast(null as string)
    from (
        {{ rows | join('\n        union all\n        ') }}
    ) as advanced (model_name, watermark_lsn, watermark_batch)
    {%- else %}
    select 1
    {%- endif -%}
    {%- endif -%}
{%- endmacro %}

{% macro default__advance_watermarks(results) -%}
    {{ exceptions.raise_compiler_error(sqlserver_cdc._not_supported('advance_watermarks')) }}
{%- endmacro %}
