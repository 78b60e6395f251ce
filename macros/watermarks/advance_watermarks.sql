{#- on-run-end hook of a plain dbt build (a runner's build records its watermarks itself, see
    finish_run): records, for every staging model of a tracked table that built in this
    invocation, the last landing batch it holds (a fact read from it, so the next build takes the
    batches after it). A plain build records no mart watermark: which mart moves is the runner's
    decision (runner/run/plan.py advance), and its next run applies the window again, with the same
    result (the marts are idempotent over a window). -#}
{% macro advance_watermarks(results) -%}
    {{ return(adapter.dispatch('advance_watermarks', 'sqlserver_cdc')(results)) }}
{%- endmacro %}

{% macro spark__advance_watermarks(results) -%}
    {%- set rows = [] -%}
    {%- if var('cdc_plan', none) is none -%}
        {%- for r in results if r.node.resource_type == 'model' and r.status == 'success'
            and r.node.config.materialized == 'cdc_staging' -%}
            {%- do rows.append("select '" ~ r.node.name ~ "', (select max(_batch_id) from " ~ r.node.relation_name ~ ")") -%}
        {%- endfor -%}
    {%- endif -%}
    {%- if rows %}
    insert into {{ sqlserver_cdc.watermark_relation() }} (model_name, watermark_lsn, invocation_id, recorded_at, watermark_batch, declaration)
    select model_name, cast(null as string), '{{ invocation_id }}', current_timestamp(), watermark_batch, cast(null as string)
    from (
        {{ rows | join('\n        union all\n        ') }}
    ) as advanced (model_name, watermark_batch)
    {%- else %}
    select 1
    {%- endif -%}
{%- endmacro %}

{% macro default__advance_watermarks(results) -%}
    {{ exceptions.raise_compiler_error(sqlserver_cdc._not_supported('advance_watermarks')) }}
{%- endmacro %}
