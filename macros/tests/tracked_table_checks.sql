{#- Generic test on a tracked table's current-state mart: every check of the table in one query
    (docs/operations.md "Checks: batch and audit"), so a run pays one test node per table it
    changed. Fails with one row per offending key or row: failed_check (which check) and detail
    (the offending values as JSON). The checks:
    - staging: its key (change tables: capture_instance, change_lsn, operation_code and the
      table's key; CES: commit_lsn, change_lsn; Debezium: the key, commit_lsn, change_lsn,
      command_id, operation) is a primary key of the trusted rows; commit_lsn (and, for change
      tables, operation) is not NULL in trusted rows;
    - current state: the key is a primary key, commit_lsn is not NULL, operation is insert,
      update, delete or snapshot;
    - history: key and valid_from_lsn are a primary key;
    - whole tables only (audit): one current version per key, contiguous validity ranges
      (history_is_contiguous), history's current versions equal the current state
      (equal_rowsets); the first and last not when this build took the current state from the
      history's open versions (_current_from_history: an initial load, a full refresh), which
      makes them true by construction.
    In a runner's incremental run (the plan's checks: batch) the query reads staging only: the rows
    whose commit LSN lies in the range of what this run landed for the table or in the marts'
    window (event channels: also the rows of the landing batches the marts take in), so a check
    that failed keeps failing while its rows are in the window, and the not-NULL checks the rows of
    this run's batches. The marts' checks are folded into their builds (_mart_guard): each MERGE
    fails, committing nothing, on a row it would write that breaks a rule (a key with a NULL part;
    current state: commit_lsn NULL, an operation outside the four; history: key and
    valid_from_lsn duplicated, which makes a version end where it starts), and its source has one
    row per key (current state) or per key and valid_from_lsn (history) by construction. A MERGE
    writes its source's rows as they are, so those are the rows this query read above the marts'
    watermarks before, and a bad row is refused before it is written. Otherwise whole tables. -#}
{% test tracked_table_checks(model, table) %}
    {{ sqlserver_cdc._tracked_table_checks(table) }}
{% endtest %}

{% macro _tracked_table_checks(table_name) -%}
    {%- set t = sqlserver_cdc._mart_table(sqlserver_cdc.tracked_table(table_name)) -%}
    {%- set staging = ref('stg_' ~ t.channel ~ '__' ~ t.name) -%}
    {%- set current = ref(t.name ~ '_current') -%}
    {%- set history = ref(t.name ~ '_history') -%}
    {%- set batch = sqlserver_cdc.check_scope() == 'batch' and execute -%}
    {%- set plan = var('cdc_plan', none) or {} -%}
    {%- set s = sqlserver_cdc._sql_string -%}
    {%- if batch -%}
        {%- set staged = sqlserver_cdc.cdc_window('stg_' ~ t.channel ~ '__' ~ t.name) -%}
        {%- set w_current = sqlserver_cdc.cdc_window(t.name ~ '_current') -%}
        {%- set w_history = sqlserver_cdc.cdc_window(t.name ~ '_history') -%}
        {%- set ranges = [] -%}
        {%- if t.tenant -%}
            {#- a tenant table's (docs/tables.md "Several databases"): per database, by its rows' source_database -#}
            {%- if staged.parts -%}
                {%- do ranges.append(sqlserver_cdc._lsn_parts(staged.parts, 'commit_lsn', 'source_database', low_op='>=')) -%}
            {%- endif -%}
            {%- for w in [w_current, w_history] if w.parts -%}
                {%- if t.channel == 'change_tables' -%}
                    {%- do ranges.append(sqlserver_cdc._lsn_parts(w.parts, 'commit_lsn', 'source_database')) -%}
                {%- else -%}
                    {%- for p in w.parts if p.get('upper_batch') -%}
                        {%- do ranges.append('(source_database = ' ~ s(p.name) ~ ' and _batch_id > ' ~ s(p.get('lower_batch') or '')
                            ~ ' and _batch_id <= ' ~ s(p.upper_batch) ~ ')') -%}
                    {%- endfor -%}
                {%- endif -%}
            {%- endfor -%}
        {%- elif staged.lower_lsn and staged.upper_lsn -%}
            {%- do ranges.append('commit_lsn between ' ~ s(staged.lower_lsn) ~ ' and ' ~ s(staged.upper_lsn)) -%}
        {%- endif -%}
        {%- if t.tenant -%}
        {%- elif t.channel == 'change_tables' and w_history.upper_lsn -%}
            {%- set lower = [w_current.lower_lsn or '', w_history.lower_lsn or ''] | min -%}
            {%- do ranges.append('(commit_lsn > ' ~ s(lower) ~ ' and commit_lsn <= ' ~ s(w_history.upper_lsn) ~ ')') -%}
        {%- elif t.channel != 'change_tables' and w_history.upper_batch -%}
            {%- set lower = [w_current.lower_batch or '', w_history.lower_batch or ''] | min -%}
            {%- do ranges.append('(_batch_id > ' ~ s(lower) ~ ' and _batch_id <= ' ~ s(w_history.upper_batch) ~ ')') -%}
        {%- endif -%}
        {%- set staged_scope = ranges | join(' or ') if ranges else 'false' -%}
        {%- set run_batches = '_batch_id > ' ~ s(plan.get('since', '')) ~ ' and _batch_id <= ' ~ s(plan.get('run_id', '')) -%}
    {%- else -%}
        {%- set staged_scope, run_batches = 'true', 'true' -%}
    {%- endif -%}
    {%- set staged_key = {'change_tables': ['capture_instance', 'change_lsn', 'operation_code'] + t.key,
        'ces': (['source_database'] if t.tenant else []) + ['commit_lsn', 'change_lsn'],
        'debezium': t.key + ['commit_lsn', 'change_lsn', 'command_id', 'operation']}[t.channel] -%}
    {%- set not_null = ['commit_lsn'] + (['operation'] if t.channel == 'change_tables' else []) -%}
    {#- one pass and one aggregation per relation: a key's rows, and whether any breaks a rule -#}
    {%- set checks = [] -%}
    {%- do checks.append(('staging', staged_key, staging, '(' ~ staged_scope ~ ') or (' ~ run_batches ~ ')', {
        'key duplicated': "count_if(quarantine_reason is null and (" ~ staged_scope ~ ")) > 1",
        'key has a NULL part': "count_if(quarantine_reason is null and (" ~ staged_scope ~ ")) > 0 and "
            ~ sqlserver_cdc._any_null(staged_key | reject('equalto', 'capture_instance') | list),
        'trusted row without ' ~ not_null | join(' or '): "count_if(quarantine_reason is null and (" ~ run_batches ~ ") and "
            ~ sqlserver_cdc._any_null(not_null) ~ ") > 0"})) -%}
    {#- a runner's incremental run checks the rows its mart builds write in the builds themselves
        (_mart_guard: current_state, history), so its check reads staging only -#}
    {%- if not batch %}
    {%- do checks.append(('current state', t.key, current, 'true', {
        'key duplicated': 'count(*) > 1',
        'key has a NULL part': sqlserver_cdc._any_null(t.key),
        'commit_lsn NULL': 'count_if(commit_lsn is null) > 0',
        'operation not insert, update, delete or snapshot':
            "count_if(operation is not null and operation not in ('insert', 'update', 'delete', 'snapshot')) > 0"})) -%}
    {%- do checks.append(('history', t.key + ['valid_from_lsn'], history, 'true', {
        'key and valid_from_lsn duplicated': 'count(*) > 1',
        'key or valid_from_lsn has a NULL part': sqlserver_cdc._any_null(t.key + ['valid_from_lsn'])})) -%}
    {%- endif %}
    {%- for relation_name, key, relation, scope, rules in checks %}
    select concat('{{ relation_name }}: ', concat_ws('; '
        {%- for label, rule in rules.items() %}, case when {{ rule }} then '{{ label }}' end{% endfor %})) as failed_check,
        to_json(struct({{ key | join(', ') }}, count(*) as rows)) as detail
    from {{ relation }}
    where {{ scope }}
    group by {{ key | join(', ') }}
    having {% for rule in rules.values() %}({{ rule }}){{ ' or ' if not loop.last }}{% endfor %}
    union all
    {%- endfor %}
    {%- if not batch %}
    {%- set audit = [('history: validity ranges not contiguous', sqlserver_cdc.test_history_is_contiguous(model=history, key=t.key))] %}
    {#- a current state this build took from the history's open versions equals them, one per key,
        by construction (its key check still runs): those two checks could not fail -#}
    {%- set current_name = t.name ~ '_current' %}
    {%- if not sqlserver_cdc._current_from_history(t, sqlserver_cdc.cdc_window(current_name), current_name) %}
    {%- do audit.extend([
        ('history: more than one current version per key', sqlserver_cdc.test_primary_key(
            model='(select * from ' ~ history ~ ' where is_current) as current_versions', columns=t.key)),
        ("history: current versions differ from the current state", sqlserver_cdc.test_equal_rowsets(
            model='(select * from ' ~ history ~ ' where is_current) as current_versions', compare_model=current,
            columns=(['source_database'] if t.tenant else []) + t.columns | map(attribute='name') | list,
            compare_where='not is_deleted'))]) %}
    {%- endif %}
    {%- for name, query in audit %}
    select '{{ name }}' as failed_check, to_json(struct(*)) as detail from (
        {{ query }}
    ) as failing
    union all
    {%- endfor %}
    {%- endif %}
    select cast(null as string) as failed_check, cast(null as string) as detail where false
{%- endmacro %}

{#- "(a is null or b is null ...)" over `columns`. -#}
{% macro _any_null(columns) -%}
    ({% for c in columns %}{{ c }} is null{{ ' or ' if not loop.last }}{% endfor %})
{%- endmacro %}
