{#- The window of the model being built (docs/marts.md "Watermarks and windows"), the one place
    models and materializations read their bounds from:
    - in a runner's build, what the run planned for it (var cdc_plan, written by runner/run/plan.py);
    - in a plain dbt build (run, build, retry), the window the last runner run left for it
      (the ledger's `plan`, see _plain_window);
    - otherwise (parse, compile, docs generate, the linter) a full window without bounds, which
      renders the whole-history SQL without a connection.
    Fields: kind (staging | mart), full (built from scratch), from_batch and through_batch
    (staging: the landing batches it takes in), lower_lsn, upper_lsn, lower_batch, upper_batch
    (a mart's changes; a tenant table's per database in parts, docs/tables.md "Several
    databases"), snapshot_lsn and reconcile (a change-table snapshot starting the window),
    evolve (the table's declaration changed since the model was built), empty (a mart with
    nothing in its window, a staging model with no batch to take in and no column to add: no
    statement runs). -#}
{% macro cdc_window(name=none) -%}
    {{ return(adapter.dispatch('cdc_window', 'sqlserver_cdc')(name=name)) }}
{%- endmacro %}

{% macro spark__cdc_window(name=none) -%}
    {%- set name = name or model.name -%}
    {%- set window = {'kind': 'mart', 'table': none, 'full': true, 'from_batch': '', 'through_batch': none,
        'lower_lsn': '', 'upper_lsn': none, 'lower_batch': '', 'upper_batch': none, 'snapshot_lsn': none,
        'reconcile': false, 'evolve': false, 'tenant': false, 'parts': []} -%}
    {%- set plan = var('cdc_plan', none) -%}
    {%- if plan is not none and name in plan.models -%}
        {%- do window.update({'full': false}) -%}
        {%- do window.update(plan.models[name]) -%}
    {%- elif plan is none and execute and flags.WHICH in ('run', 'build', 'retry') -%}
        {%- do window.update(sqlserver_cdc._plain_window(name)) -%}
    {%- endif -%}
    {%- set lsns_done = window.upper_lsn is none or window.lower_lsn >= window.upper_lsn -%}
    {%- set batches_done = window.upper_batch is none or window.lower_batch >= window.upper_batch -%}
    {%- if window.tenant and window.kind == 'mart' -%}
        {#- a tenant table's mart: per database, its part of the window (none: nothing to apply) -#}
        {%- set done = namespace(lsns=true, batches=true, snapshot=false) -%}
        {%- for p in window.parts -%}
            {%- set done.lsns = done.lsns and (p.get('upper_lsn') is none or (p.get('lower_lsn') or '') >= p.upper_lsn) -%}
            {%- set done.batches = done.batches and (p.get('upper_batch') is none or (p.get('lower_batch') or '') >= p.upper_batch) -%}
            {%- set done.snapshot = done.snapshot or p.get('snapshot_lsn') is not none -%}
        {%- endfor -%}
        {%- set lsns_done, batches_done = done.lsns, done.batches -%}
        {%- do window.update({'snapshot_lsn': 'per database' if done.snapshot else none}) -%}
    {%- endif -%}
    {%- set staged_all = window.through_batch is not none and window.from_batch >= window.through_batch -%}
    {%- do window.update({'empty': not window.full and (
        (window.kind == 'mart' and window.snapshot_lsn is none and lsns_done and batches_done)
        or (window.kind == 'staging' and not window.evolve and staged_all))}) -%}
    {{ return(window) }}
{%- endmacro %}

{% macro default__cdc_window(name=none) -%}
    {{ exceptions.raise_compiler_error(sqlserver_cdc._not_supported('cdc_window')) }}
{%- endmacro %}

{#- A plain dbt build's window for model `name` (docs/marts.md "Watermarks and windows"), read
    from what the last runner run recorded; nothing is decided here. A staging model takes the
    batches after the last one it took in (its watermark; all with --full-refresh or when its
    table does not exist). A mart takes the window that run left for it (runner/run/plan.py
    plain_windows): what the run did not apply, or, with --full-refresh or when the mart does not
    exist, a rebuild up to the run's bound; a table the run stopped at a gap fails with the gap's
    message. Before any runner run a mart has nothing to apply (or is created from what is staged). -#}
{% macro _plain_window(name) -%}
    {%- set ledger = sqlserver_cdc.ledger_relation() -%}
    {%- set planned = {'models': {}, 'tables': {}, 'plain': {}} -%}
    {%- if run_query("show tables in " ~ ledger.schema ~ " like '" ~ ledger.identifier ~ "'").rows | length > 0
        and 'plan' in run_query('describe table ' ~ ledger).columns[0].values() -%}
        {%- set last = run_query("select plan from " ~ ledger ~ " where plan is not null order by run_id desc limit 1").rows -%}
        {%- if last -%}{%- do planned.update(fromjson(last[0][0])) -%}{%- endif -%}
    {%- endif -%}
    {%- set node = graph.nodes.values() | selectattr('resource_type', 'equalto', 'model') | selectattr('name', 'equalto', name) | first -%}
    {%- set full = flags.FULL_REFRESH or adapter.get_relation(database=node.database, schema=node.schema, identifier=node.alias) is none -%}
    {%- set table = (node.config.meta or {}).get('cdc_table') -%}
    {%- if table is none -%}
        {%- set mark = run_query("select max_by(watermark_batch, recorded_at) from " ~ sqlserver_cdc.watermark_relation()
            ~ " where model_name = " ~ sqlserver_cdc._sql_string(name)).rows[0][0] -%}
        {{ return({'kind': 'staging', 'full': full, 'from_batch': '' if full else (mark or ''), 'through_batch': none}) }}
    {%- endif -%}
    {%- for removed in ['cdc_upper_lsn', 'cdc_upper_batch'] if var(removed, none) is not none -%}
        {{ exceptions.raise_compiler_error("var " ~ removed ~ " is no longer read: a plain dbt build applies the bounds the last runner "
            ~ "run recorded; to cap the bound, run python -m runner run --upper-lsn <LSN> (docs/marts.md \"Watermarks and windows\")") }}
    {%- endfor -%}
    {%- set gap = planned.tables.get(table, {}).get('gap') -%}
    {%- if gap and not full -%}
        {{ exceptions.raise_compiler_error(gap) }}
    {%- endif -%}
    {%- set window = {'kind': 'mart', 'table': table, 'full': full} -%}
    {%- if planned.models -%}
        {%- set recorded = planned.get('plain', {}).get(name) -%}
        {%- if recorded is none -%}
            {{ exceptions.raise_compiler_error("model " ~ name ~ " has no window in the last runner run's plan (the model is new, "
                ~ "or that run is of an earlier release): run python -m runner run, which plans and builds it") }}
        {%- endif -%}
        {%- do window.update(recorded.full if full else recorded.remaining) -%}
    {%- endif -%}
    {{ return(window) }}
{%- endmacro %}
