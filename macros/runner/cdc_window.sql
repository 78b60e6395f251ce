{#- The window of the model being built (docs/marts.md "Watermarks and windows"), the one place
    models and materializations read their bounds from:
    - in a runner's build, what the run planned for it (var cdc_plan, written by runner/plan.py);
    - in a plain dbt build (run, build, retry), the window the last runner run planned for it
      (the ledger's `plan`), continued from the model's own watermark (see _plain_window);
    - otherwise (parse, compile, docs generate, the linter) a full window without bounds, which
      renders the whole-history SQL without a connection.
    Fields: kind (staging | mart), full (built from scratch), from_batch and through_batch
    (staging: the landing batches it takes in), lower_lsn, upper_lsn, lower_batch, upper_batch
    (a mart's changes), snapshot_lsn and reconcile (a change-table snapshot starting the window),
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
        'reconcile': false, 'evolve': false} -%}
    {%- set plan = var('cdc_plan', none) -%}
    {%- if plan is not none and name in plan.models -%}
        {%- do window.update({'full': false}) -%}
        {%- do window.update(plan.models[name]) -%}
    {%- elif plan is none and execute and flags.WHICH in ('run', 'build', 'retry') -%}
        {%- do window.update(sqlserver_cdc._plain_window(name)) -%}
    {%- endif -%}
    {%- set lsns_done = window.upper_lsn is none or window.lower_lsn >= window.upper_lsn -%}
    {%- set batches_done = window.upper_batch is none or window.lower_batch >= window.upper_batch -%}
    {%- set staged_all = window.through_batch is not none and window.from_batch >= window.through_batch -%}
    {%- do window.update({'empty': not window.full and (
        (window.kind == 'mart' and window.snapshot_lsn is none and lsns_done and batches_done)
        or (window.kind == 'staging' and not window.evolve and staged_all))}) -%}
    {{ return(window) }}
{%- endmacro %}

{% macro default__cdc_window(name=none) -%}
    {{ exceptions.raise_compiler_error(sqlserver_cdc._not_supported('cdc_window')) }}
{%- endmacro %}

{#- A plain dbt build's window for model `name`: the last runner run's plan for it, from the
    model's own watermark (so a build after a successful run finds nothing to do, one after a
    failed run applies what it did not; a table the run stopped at a gap fails with the gap's
    message). var cdc_upper_lsn (one LSN, or channel -> LSN) and
    cdc_upper_batch replace the planned bounds; --full-refresh, or a model that does not exist,
    rebuilds it up to them (a change-table mart from the newest snapshot at or below them). -#}
{% macro _plain_window(name) -%}
    {%- set ledger = sqlserver_cdc.ledger_relation() -%}
    {%- set planned = {'models': {}, 'tables': {}} -%}
    {%- if run_query("show tables in " ~ ledger.schema ~ " like '" ~ ledger.identifier ~ "'").rows | length > 0
        and 'plan' in run_query('describe table ' ~ ledger).columns[0].values() -%}
        {%- set last = run_query("select plan from " ~ ledger ~ " where plan is not null order by run_id desc limit 1").rows -%}
        {%- if last -%}{%- do planned.update(fromjson(last[0][0])) -%}{%- endif -%}
    {%- endif -%}
    {%- set window = dict(planned.models.get(name, {})) -%}
    {%- set mark = run_query("select max_by(watermark_lsn, recorded_at), max_by(watermark_batch, recorded_at) from "
        ~ sqlserver_cdc.watermark_relation() ~ " where model_name = " ~ sqlserver_cdc._sql_string(name)).rows[0] -%}
    {%- set node = graph.nodes.values() | selectattr('resource_type', 'equalto', 'model') | selectattr('name', 'equalto', name) | first -%}
    {%- set full = flags.FULL_REFRESH or adapter.get_relation(database=node.database, schema=node.schema, identifier=node.alias) is none -%}
    {%- set table = (node.config.meta or {}).get('cdc_table') -%}
    {%- if table is none -%}
        {{ return({'kind': 'staging', 'full': full, 'from_batch': '' if full else (mark[1] or ''), 'through_batch': none}) }}
    {%- endif -%}
    {%- set gap = planned.tables.get(table, {}).get('gap') -%}
    {%- if gap and not full -%}
        {{ exceptions.raise_compiler_error(gap) }}
    {%- endif -%}
    {%- set channel = var('cdc_tracked_tables', {})[table].get('channel', 'change_tables') -%}
    {%- set upper = var('cdc_upper_lsn', none) -%}
    {%- set upper = upper.get(channel) if upper is mapping else upper -%}
    {%- if upper is not none and not modules.re.match('^[0-9A-F]{20}$', upper | string) -%}
        {{ exceptions.raise_compiler_error("var cdc_upper_lsn must be a canonical LSN (20 uppercase hex digits) or a mapping of channel to such LSNs; got '" ~ upper ~ "'") }}
    {%- endif -%}
    {%- set upper_batch = var('cdc_upper_batch', none) -%}
    {%- set upper_batch = upper_batch.get(channel) if upper_batch is mapping else upper_batch -%}
    {%- do window.update({'kind': 'mart', 'table': table, 'full': full, 'evolve': true,
        'upper_lsn': upper if upper is not none else window.get('upper_lsn'),
        'upper_batch': upper_batch if upper_batch is not none else window.get('upper_batch'),
        'lower_lsn': '' if full else (mark[0] or ''), 'lower_batch': '' if full else (mark[1] or '')}) -%}
    {%- if channel == 'change_tables' -%}
        {%- set latest = planned.tables.get(table, {}).get('latest_snapshot') -%}
        {%- if full -%}
            {%- do window.update({'snapshot_lsn': latest if latest and window.upper_lsn and latest <= window.upper_lsn else none,
                'reconcile': false}) -%}
        {%- elif not (window.get('reconcile') and window.get('snapshot_lsn', '') > window.lower_lsn) -%}
            {%- do window.update({'snapshot_lsn': none, 'reconcile': false}) -%}
        {%- endif -%}
        {%- if window.snapshot_lsn -%}{%- do window.update({'lower_lsn': window.snapshot_lsn}) -%}{%- endif -%}
    {%- endif -%}
    {{ return(window) }}
{%- endmacro %}
