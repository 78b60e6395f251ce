{#- Batch-scoped data tests (docs/operations.md "Checks: batch and audit"). The checks of a
    tracked table are one test, tracked_table_checks. A data test's `config: where:` may hold
    these tokens, expanded when the test runs:
    - __cdc_run_batches__: on a staging table, the rows of the landing batches this run took in
      (after the previous run's batch, up to this run's; without a runner run, the latest batch
      staged);
    - __cdc_batch_lsns__: on a staging table, the rows whose commit_lsn lies within the LSN range
      of the trusted rows of those batches (so a change landed again in an earlier batch is
      still compared with them); false when they staged no trusted row;
    - __cdc_watermark__: on a mart, its watermark before this run (a runner records the new one
      after the tests), as a string literal, e.g. `commit_lsn > __cdc_watermark__`.
    In a runner's incremental run (the plan's checks: batch) a test then reads only what the run
    changed, and its cost follows the batch. Otherwise (plain dbt build, dbt test, `python -m
    runner audit`, and every --full-refresh run) __cdc_batch_lsns__ and __cdc_run_batches__ are
    true and __cdc_watermark__ is '' (below every LSN): the test checks the whole table. Tests
    that cannot be scoped carry the tag cdc_audit, which the runner's incremental runs exclude. -#}
{% macro check_scope() -%}
    {%- set plan = var('cdc_plan', none) -%}
    {%- if plan is not none -%}
        {{ return(plan.checks) }}
    {%- endif -%}
    {%- set scope = var('cdc_checks', 'all') -%}
    {%- if scope not in ('all', 'batch') -%}
        {{ exceptions.raise_compiler_error("var cdc_checks must be 'all' or 'batch'; got '" ~ scope ~ "'") }}
    {%- endif -%}
    {{ return(scope) }}
{%- endmacro %}

{#- `where` of a data test with its scope tokens expanded for `relation` (the tested model). -#}
{% macro expand_check_scope(where, relation) -%}
    {{ return(adapter.dispatch('expand_check_scope', 'sqlserver_cdc')(where=where, relation=relation)) }}
{%- endmacro %}

{% macro spark__expand_check_scope(where, relation) -%}
    {%- set plan = var('cdc_plan', none) -%}
    {%- set batch = sqlserver_cdc.check_scope() == 'batch' and execute -%}
    {%- if plan is not none -%}
        {%- set batches = "_batch_id > '" ~ plan.since ~ "' and _batch_id <= '" ~ plan.run_id ~ "'" -%}
    {%- else -%}
        {%- set batches = '_batch_id = (select max(_batch_id) from ' ~ relation ~ ')' -%}
    {%- endif -%}
    {%- if '__cdc_batch_lsns__' in where -%}
        {%- set predicate = 'true' -%}
        {%- if batch -%}
            {%- set row = run_query('select min(commit_lsn), max(commit_lsn) from ' ~ relation
                ~ ' where quarantine_reason is null and ' ~ batches).rows[0] -%}
            {%- set predicate = "commit_lsn between '" ~ row[0] ~ "' and '" ~ row[1] ~ "'" if row[0] is not none else 'false' -%}
        {%- endif -%}
        {%- set where = where | replace('__cdc_batch_lsns__', '(' ~ predicate ~ ')') -%}
    {%- endif -%}
    {%- if '__cdc_run_batches__' in where -%}
        {%- set where = where | replace('__cdc_run_batches__', '(' ~ (batches if batch else 'true') ~ ')') -%}
    {%- endif -%}
    {%- if '__cdc_watermark__' in where -%}
        {%- set window = sqlserver_cdc.cdc_window(relation.identifier) if batch else {} -%}
        {%- set where = where | replace('__cdc_watermark__', "'" ~ (window.get('lower_lsn') or '') ~ "'") -%}
    {%- endif -%}
    {{ return(where) }}
{%- endmacro %}

{% macro default__expand_check_scope(where, relation) -%}
    {{ exceptions.raise_compiler_error(sqlserver_cdc._not_supported('expand_check_scope')) }}
{%- endmacro %}

{#- dbt's get_where_subquery (the relation a data test reads, filtered by its `where` config),
    taken over through the root project's dispatch config for namespace 'dbt' to expand the
    scope tokens; without tokens it is dbt's own. -#}
{% macro spark__get_where_subquery(relation) -%}
    {%- set where = config.get('where', '') -%}
    {%- if where -%}
        {%- if '__cdc_' in where -%}
            {%- set where = sqlserver_cdc.expand_check_scope(where, relation) -%}
        {%- endif -%}
        {#- the alias keeps Spark from reading `where (true)` as a table alias with a column list -#}
        {%- set filtered -%}
            (select * from {{ relation }} as dbt_scoped where {{ where }}) dbt_subquery
        {%- endset -%}
        {{ return(filtered) }}
    {%- endif -%}
    {{ return(relation) }}
{%- endmacro %}
