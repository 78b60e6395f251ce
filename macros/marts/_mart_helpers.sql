{#- Private helpers shared by the current-state and history marts. -#}

{#- A tracked table as its marts see it: a tenant table's key starts with source_database (docs/tables.md
    "Several databases"), so each database's rows are keys of their own. -#}
{% macro _mart_table(t) -%}
    {%- if not t.tenant -%}{{ return(t) }}{%- endif -%}
    {%- set m = dict(t) -%}
    {%- do m.update({'key': ['source_database'] + t.key}) -%}
    {{ return(m) }}
{%- endmacro %}

{#- The staging model of a tracked table: stg_<channel>__<table>. -#}
{% macro _staging_ref(t) -%}
    {{ return(ref('stg_' ~ t.channel ~ '__' ~ t.name)) }}
{%- endmacro %}

{#- True for channels whose events can arrive late and out of order (CES, Debezium): a mart run then
    recomputes every key touched by newly arrived events from all of that key's events, instead
    of applying an LSN window on top of the stored rows. -#}
{% macro _recomputes_keys(t) -%}
    {{ return(t.channel != 'change_tables') }}
{%- endmacro %}

{#- The window of a mart build as SQL, from cdc_window (docs/marts.md "Watermarks and windows"):
    {lower, upper, lower_batch, upper_batch, snapshot (or none), reconcile, scoped (an incremental
    build: the changes above the mart's watermark; otherwise the whole staged history up to the
    bound), full, empty, evolve, complete_snapshots, touch_all (Debezium, see
    _debezium_complete_snapshots), range (a condition on commit_lsn that every part's changes
    meet)}. A table of one database has literal bounds, so Delta skips the staged files outside
    them. A tenant table's (docs/tables.md "Several databases") are per database, one part of the
    window each: `case __DB__ when '<name>' then '<bound>' ... end`, whose __DB__ the caller puts
    a row's source_database in (_at), NULL (nothing) for a database without a part; range then
    bounds them all with literals, and reconciling names the databases whose snapshot
    reconciles the marts. -#}
{% macro _mart_window(t) -%}
    {%- set w = sqlserver_cdc.cdc_window() -%}
    {%- set literal = sqlserver_cdc._window_literal -%}
    {%- if w.tenant -%}
        {%- set parts = w.parts or [] -%}
        {%- set lowers = parts | map(attribute='lower_lsn') | map('default', '', true) | list -%}
        {%- set uppers = parts | selectattr('upper_lsn') | map(attribute='upper_lsn') | list -%}
        {%- set range -%}
            {%- if uppers | length == parts | length and parts -%}
            commit_lsn > {{ literal(lowers | min) }} and commit_lsn <= {{ literal(uppers | max) }}
            {%- else -%}
            true
            {%- endif -%}
        {%- endset -%}
        {%- set window = {'lower': sqlserver_cdc._by_database(parts, 'lower_lsn', ''), 'upper': sqlserver_cdc._by_database(parts, 'upper_lsn'),
            'lower_batch': sqlserver_cdc._by_database(parts, 'lower_batch', ''),
            'upper_batch': sqlserver_cdc._by_database(parts, 'upper_batch'),
            'snapshot': sqlserver_cdc._by_database(parts, 'snapshot_lsn') if parts | selectattr('snapshot_lsn') | list else none,
            'reconcile': parts | selectattr('reconcile') | list | length > 0,
            'reconciling': parts | selectattr('reconcile') | map(attribute='name') | list,
            'names': parts | map(attribute='name') | list, 'range': range,
            'scoped': not w.full, 'full': w.full, 'empty': w.empty, 'evolve': w.evolve, 'tenant': true,
            'complete_snapshots': [], 'touch_all': false} -%}
    {%- else -%}
        {%- set window = {'lower': literal(w.lower_lsn or ''), 'upper': literal(w.upper_lsn),
            'lower_batch': literal(w.lower_batch or ''), 'upper_batch': literal(w.upper_batch),
            'snapshot': literal(w.snapshot_lsn) if w.snapshot_lsn else none, 'reconcile': w.reconcile, 'range': 'true',
            'scoped': not w.full, 'full': w.full, 'empty': w.empty, 'evolve': w.evolve, 'tenant': false,
            'complete_snapshots': [], 'touch_all': false} -%}
    {%- endif -%}
    {%- if t.channel == 'debezium' and execute and not w.empty and (w.upper_lsn is not none or w.tenant) -%}
        {%- set lower_batches = {} -%}
        {%- for p in (w.parts or []) if w.tenant -%}{%- do lower_batches.update({p.name: p.get('lower_batch') or ''}) -%}{%- endfor -%}
        {%- do window.update(sqlserver_cdc._debezium_complete_snapshots(t, window,
            none if w.full else (lower_batches if w.tenant else w.lower_batch))) -%}
    {%- endif -%}
    {{ return(window) }}
{%- endmacro %}

{#- A tenant window's bound per database: `case __DB__ when '<name>' then '<value>' ... end` over
    the parts' `field` ('' for a part without one when `missing` is '', else NULL). -#}
{% macro _by_database(parts, field, missing=none) -%}
    {%- set whens = [] -%}
    {%- for p in parts -%}
        {%- set value = p.get(field) -%}
        {%- if value is none and missing is not none -%}{%- set value = missing -%}{%- endif -%}
        {%- if value is not none -%}
            {%- do whens.append("when " ~ sqlserver_cdc._sql_string(p.name) ~ " then " ~ sqlserver_cdc._sql_string(value)) -%}
        {%- endif -%}
    {%- endfor -%}
    {{ return(('(case __DB__ ' ~ whens | join(' ') ~ ' end)') if whens else 'cast(null as string)') }}
{%- endmacro %}

{#- A window's bound (see _mart_window) for the rows whose source_database is `column`: a tenant
    table's per-database bound, a table of one database's literal as it is. -#}
{% macro _at(bound, column) -%}
    {{- bound | replace('__DB__', column) -}}
{%- endmacro %}

{#- An LSN or batch id of a window as a SQL literal (NULL when there is none). -#}
{% macro _window_literal(value) -%}
    {{ return("'" ~ value ~ "'" if value is not none else 'cast(null as string)') }}
{%- endmacro %}

{#- Keys whose transactions a mart rebuilds for a key-recomputing channel: those
    with a trusted event up to the window's upper LSN that arrived in a landing batch after the
    window's lower batch, or whose LSN is above its lower LSN (every key when the window is not
    scoped, or a complete Debezium snapshot arrived). window: see _mart_window. -#}
{% macro _mart_touched(t, window) -%}
    {%- set at = sqlserver_cdc._at %}
    select distinct {% for k in t.key %}staged.{{ k }}{{ ', ' if not loop.last }}{% endfor %}
    from {{ sqlserver_cdc._staging_ref(t) }} as staged
    where staged.quarantine_reason is null
        and staged.commit_lsn <= {{ at(window.upper, 'staged.source_database') }}
        {%- if window.scoped and not window.touch_all %}
        and ((staged._batch_id > {{ at(window.lower_batch, 'staged.source_database') }}
                and staged._batch_id <= {{ at(window.upper_batch, 'staged.source_database') }})
            or staged.commit_lsn > {{ at(window.lower, 'staged.source_database') }})
        {%- endif %}
{%- endmacro %}

{#- The changes a mart's transactions net. Change tables: trusted staged rows with
    lower < commit_lsn <= upper, with their commit time from lsn_time_mapping (read for the
    window's LSNs only). Key-recomputing channels: every trusted event up to upper of the touched
    keys (all keys when the window is not scoped), in LSN order, with the columns an event did not
    carry filled from the key's previous event (an insert starts afresh: what it does not carry is
    NULL), _from_snapshot for a Debezium snapshot row. window: see _mart_window; a scoped window's bounds are literals, so Delta skips
    the staged files outside them. -#}
{% macro _mart_changes(t, window) -%}
    {%- if sqlserver_cdc._recomputes_keys(t) %}
    {%- set non_key = sqlserver_cdc._non_key_columns(t) %}
    select
        commit_lsn, change_lsn, command_id, operation_code, update_mask, commit_time,
        {%- for k in t.key %}
        {{ k }},
        {%- endfor %}
        {%- for c in non_key %}
        _filled_{{ c }}.v as {{ c }},
        {%- endfor %}
        operation = 'snapshot' as _from_snapshot
    from (
        select
            *,
            {%- for c in non_key %}
            last(case when _has_{{ c }} then struct({{ c }} as v) end, true) over carried
                as _filled_{{ c }}{{ ',' if not loop.last }}
            {%- endfor %}
        from (
            select
                staged.*,
                count_if(staged.operation_code = 2) over (
                    partition by {% for k in t.key %}staged.{{ k }}{{ ', ' if not loop.last }}{% endfor %}
                    order by staged.commit_lsn, staged.change_lsn
                    rows between unbounded preceding and current row
                ) as _life
            from {{ sqlserver_cdc._staging_ref(t) }} as staged
            {%- if window.scoped %}
            left semi join touched
                on {{ sqlserver_cdc._key_match(t, 'staged', 'touched') }}
            {%- endif %}
            where staged.quarantine_reason is null
                and staged.commit_lsn <= {{ sqlserver_cdc._at(window.upper, 'staged.source_database') }}
        )
        window carried as (
            partition by {{ t.key | join(', ') }}, _life order by commit_lsn, change_lsn
            rows between unbounded preceding and current row
        )
    )
    {%- elif t.instances | length > 1 %}
    {{ sqlserver_cdc._merged_instance_changes(t, window) }}
    {%- else %}
    {{ sqlserver_cdc._staged_changes(t, window) }}
    {%- endif %}
{%- endmacro %}

{#- The trusted staged change rows of a change-table table with lower < commit_lsn <= upper
    (snapshot rows left out), with their commit time from the lsn_time_mapping of their database
    (a tenant table's rows by their source_database, per its window's parts). -#}
{% macro _staged_changes(t, window) -%}
    {%- set at = sqlserver_cdc._at %}
    {%- set mapped = sqlserver_cdc._database_name_of(t, 'source_database') if t.tenant else 'source_database' %}
    select staged.*, commit_times.tran_end_time as commit_time
    from {{ sqlserver_cdc._staging_ref(t) }} as staged
    left join (
        select {{ mapped }} as _database, start_lsn, tran_end_time
        from {{ ref('stg_cdc_metadata__lsn_time_mapping') }}
        where quarantine_reason is null and {{ sqlserver_cdc._raw_database_filter(t) }} and {{ window.range | replace('commit_lsn', 'start_lsn') }}
            and start_lsn > {{ at(window.lower, mapped) }} and start_lsn <= {{ at(window.upper, mapped) }}
    ) as commit_times
        on staged.commit_lsn = commit_times.start_lsn
        {%- if t.tenant %}
        and staged.source_database = commit_times._database
        {%- endif %}
    where staged.quarantine_reason is null and {{ window.range | replace('commit_lsn', 'staged.commit_lsn') }}
        and staged.commit_lsn > {{ at(window.lower, 'staged.source_database') }}
        and staged.commit_lsn <= {{ at(window.upper, 'staged.source_database') }}
        -- snapshot rows are not changes: a snapshot starts a window (see transactions)
        and staged.operation != 'snapshot'
{%- endmacro %}

{#- The changes of a table with several capture instances (docs/tables.md "Capture-instance changes"):
    a change two instances both captured (same commit LSN, change LSN, operation and key) comes
    once, each column from the latest instance that captures it, the masks ORed (they are in the
    table's ordinals already, see stage_change_table). A column some instance does not capture
    keeps the key's previous value in that instance's rows: the last captured one before it in
    the window, else (before any insert in the window) the current-state mart's; an insert starts
    afresh. Rows staged before staging recorded capture_instance count as the first instance's. -#}
{% macro _merged_instance_changes(t, window) -%}
    {%- set non_key = sqlserver_cdc._non_key_columns(t) -%}
    {%- set names = t.instances | map(attribute='name') | map('lower') | list -%}
    {%- set instance = "coalesce(capture_instance, '" ~ names[0] ~ "')" -%}
    {%- set capturers = {} -%}
    {%- for c in non_key -%}
        {%- set by = [] -%}
        {%- for i in t.instances if c in i.columns | map(attribute='name') | list -%}{%- do by.append(i.name | lower) -%}{%- endfor -%}
        {%- do capturers.update({c: by}) -%}
    {%- endfor -%}
    {%- set partial = [] -%}
    {%- for c in non_key if capturers[c] | length < names | length -%}{%- do partial.append(c) -%}{%- endfor -%}
    {%- set rank -%}case {{ instance }}{% for n in names %} when '{{ n }}' then {{ loop.index }}{% endfor %} end{%- endset -%}
    {%- set known = sqlserver_cdc._current_relation(t) if window.scoped and partial else none -%}
    select
        merged.commit_lsn, merged.change_lsn, merged.command_id, merged.operation, merged.operation_code,
        merged.update_mask, merged.commit_time,
        {%- for k in t.key %}
        merged.{{ k }},
        {%- endfor %}
        {%- for c in non_key %}
        {%- if c in partial %}
        case when merged._filled_{{ c }} is not null then merged._filled_{{ c }}.v
            {%- if known is not none %} when merged._life = 0 then known.{{ c }}{% endif %} end as {{ c }}
        {%- else %}
        merged.{{ c }}
        {%- endif %}{{ ',' if not loop.last }}
        {%- endfor %}
    from (
        -- each column carried to the rows of instances that do not capture it, within a key's life
        select
            *
            {%- for c in partial %},
            last(case when _has_{{ c }} then struct({{ c }} as v) end, true) over carried as _filled_{{ c }}
            {%- endfor %}
        from (
            select
                *,
                count_if(operation_code = 2) over (
                    partition by {{ t.key | join(', ') }} order by commit_lsn, change_lsn, operation_code
                    rows between unbounded preceding and current row
                ) as _life
            from (
                -- one row per change, whichever instances captured it
                select
                    commit_lsn, change_lsn, operation, operation_code,
                    {%- for k in t.key %}
                    {{ k }},
                    {%- endfor %}
                    max(command_id) as command_id,
                    {{ sqlserver_cdc.bit_or_masks('update_mask', ((t.columns | map(attribute='ordinal') | max) + 7) // 8) }} as update_mask,
                    max(commit_time) as commit_time,
                    {%- for c in non_key %}
                    {%- set captures = instance ~ " in ('" ~ capturers[c] | join("', '") ~ "')" %}
                    {%- if c in partial %}
                    max_by({{ c }}, case when {{ captures }} then {{ rank }} end) as {{ c }},
                    bool_or({{ captures }}) as _has_{{ c }}{{ ',' if not loop.last }}
                    {%- else %}
                    max_by({{ c }}, {{ rank }}) as {{ c }}{{ ',' if not loop.last }}
                    {%- endif %}
                    {%- endfor %}
                from (
                    {{ sqlserver_cdc._staged_changes(t, window) | indent(20) }}
                )
                group by commit_lsn, change_lsn, operation, operation_code, {{ t.key | join(', ') }}
            )
        )
        window carried as (
            partition by {{ t.key | join(', ') }}, _life order by commit_lsn, change_lsn, operation_code
            rows between unbounded preceding and current row
        )
    ) as merged
    {%- if known is not none %}
    left join (
        select {{ sqlserver_cdc._stored_columns(known, t, t.key + partial, window.evolve) }} from {{ known }} where not is_deleted
    ) as known
        on {{ sqlserver_cdc._key_match(t, 'merged', 'known') }}
    {%- endif %}
{%- endmacro %}

{#- The captured columns of a tracked table that are not key columns, in declaration order. -#}
{% macro _non_key_columns(t) -%}
    {%- set keys = t.key | map('lower') | list -%}
    {%- set names = [] -%}
    {%- for c in t.columns if c.name | lower not in keys %}{% do names.append(c.name) %}{% endfor -%}
    {{ return(names) }}
{%- endmacro %}

{#- key columns equal between two aliases -#}
{% macro _key_match(t, left, right) -%}
    {%- for k in t.key %}{{ left }}.{{ k }} = {{ right }}.{{ k }}{{ ' and ' if not loop.last }}{% endfor -%}
{%- endmacro %}

{% macro _operation_name(code) -%}
    case {{ code }} when 1 then 'delete' when 2 then 'insert' when 4 then 'update' when 5 then 'snapshot' end
{%- endmacro %}

{#- A mart's dependencies that its SQL does not ref at parse time (dbt orders the build by them):
    its staging, the lsn_time_mapping (change tables: commit times), the Debezium events
    (complete snapshots' markers); and, for the current-state mart, the history mart: it is
    built first, so both reconcile against the current state as it was before the build. -#}
{% macro _mart_dependencies(t, mart) -%}
-- depends_on: {{ sqlserver_cdc._staging_ref(t) }}
{%- if t.channel == 'change_tables' %}
-- depends_on: {{ ref('stg_cdc_metadata__lsn_time_mapping') }}
{%- elif t.channel == 'debezium' %}
-- depends_on: {{ ref('stg_debezium__events') }}
{%- endif %}
{%- if mart == 'current_state' %}
-- depends_on: {{ ref(t.name ~ '_history') }}
{%- endif %}
{%- endmacro %}

{#- The checks of the rows a mart build writes, folded into its statement (docs/operations.md
    "Checks: batch and audit"): a predicate that is true for a good row and, for a row that breaks
    one of `rules` ({label: SQL condition over the row}), fails the statement with
    "cdc check failed: <table> <mart>: <label>: <the row's `columns` as JSON>", so nothing of the
    build is committed (a MERGE is one commit). Costs no scan: the rules read the row only. -#}
{% macro _mart_guard(t, mart, rules, columns) -%}
    (case
        {%- for label, rule in rules.items() %}
        when {{ rule }} then raise_error(concat('cdc check failed: {{ t.name }} {{ mart }}: {{ label }}: ',
            to_json(struct({{ columns | join(', ') }})), '. Nothing of this build was written; the staged rows of the window are the cause: see docs/operations.md "Checks: batch and audit"'))
        {%- endfor %}
        else true
    end)
{%- endmacro %}
