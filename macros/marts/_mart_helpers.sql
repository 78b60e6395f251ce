{#- Private helpers shared by the current-state and history marts. -#}

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

{#- The run's window as one row (lower_lsn, upper_lsn), computed once per mart run: lower is
    the mart's watermark ('' on a first or full-refresh run), upper the run's bound for the
    table's channel. On an incremental change-table run it also checks for a gap (see
    _assert_no_gap) before anything is applied. Channels that recompute keys add the landing
    batch the mart last applied (lower_batch) and the run's last landed batch (upper_batch). -#}
{% macro _mart_bounds(t) -%}
    {%- if sqlserver_cdc._recomputes_keys(t) %}
    select
        {{ sqlserver_cdc.mart_lower_lsn() if is_incremental() else "''" }} as lower_lsn,
        {{ sqlserver_cdc.upper_lsn(t.channel) }} as upper_lsn,
        {{ sqlserver_cdc.mart_lower_batch() if is_incremental() else "''" }} as lower_batch,
        {{ sqlserver_cdc.upper_batch(t.channel) }} as upper_batch
    {%- else %}
    -- depends_on: {{ ref('stg_cdc_metadata__change_tables') }}
    select
        lower_lsn,
        upper_lsn
    from (
        select
            {{ sqlserver_cdc.mart_lower_lsn() if is_incremental() else "''" }} as lower_lsn,
            {{ sqlserver_cdc.upper_lsn(t.channel) }} as upper_lsn,
            {{ sqlserver_cdc.min_lsn(t.capture_instance) }} as available_lsn
    )
    {%- if is_incremental() %}
    where {{ sqlserver_cdc._assert_no_gap(t, 'lower_lsn', 'available_lsn') }}
    {%- endif %}
    {%- endif %}
{%- endmacro %}

{#- The window of an incremental mart run, asked at execution time: {lower, upper, empty}, empty
    when the watermark has reached the run's upper bound (or nothing is mapped yet) and, for
    channels that recompute keys, no landing batch arrived since the mart's last run. none at
    parse time (the full SQL is rendered then, so its refs are recorded) and on full refresh.
    An empty window selects no rows without reading any change, so a table with no new changes
    costs one small query and an empty insert; a non-empty change-table window is also applied
    as literals, which Spark filters on before decoding the rest of each staged row. -#}
{% macro _mart_window(t) -%}
    {%- if not execute or not is_incremental() -%}
        {{ return(none) }}
    {%- endif -%}
    {%- if sqlserver_cdc._recomputes_keys(t) -%}
        {%- set batches_done = 'coalesce(lower_batch >= upper_batch, true)' -%}
        {%- set batch_bounds = ', ' ~ sqlserver_cdc.mart_lower_batch() ~ ' as lower_batch, '
            ~ sqlserver_cdc.upper_batch(t.channel) ~ ' as upper_batch' -%}
    {%- else -%}
        {%- set batches_done, batch_bounds = 'true', '' -%}
    {%- endif -%}
    {%- set query -%}
        select lower_lsn, upper_lsn, coalesce(lower_lsn >= upper_lsn, true) and {{ batches_done }} as empty
        from (
            select {{ sqlserver_cdc.mart_lower_lsn() }} as lower_lsn,
                {{ sqlserver_cdc.upper_lsn(t.channel) }} as upper_lsn{{ batch_bounds }}
        )
    {%- endset -%}
    {%- set row = run_query(query).rows[0] -%}
    {{ return({'lower': row[0], 'upper': row[1], 'empty': row[2]}) }}
{%- endmacro %}

{#- Keys a run of a key-recomputing mart rebuilds: those with a trusted event that arrived in a
    landing batch after the mart's last run, or whose LSN is above its watermark (every key on
    a first or full-refresh run). -#}
{% macro _mart_touched(t) -%}
    select distinct {% for k in t.key %}staged.{{ k }}{{ ', ' if not loop.last }}{% endfor %}
    from {{ sqlserver_cdc._staging_ref(t) }} as staged
    cross join bounds
    where staged.quarantine_reason is null
        and staged.commit_lsn <= bounds.upper_lsn
        {%- if is_incremental() %}
        and ((staged._batch_id > bounds.lower_batch and staged._batch_id <= bounds.upper_batch)
            or staged.commit_lsn > bounds.lower_lsn)
        {%- endif %}
{%- endmacro %}

{#- Changes a mart run processes. Change tables: trusted staged rows with
    lower_lsn < commit_lsn <= upper_lsn, with their commit time from lsn_time_mapping (read for
    the window's LSNs only). Key-recomputing channels: every trusted event up to
    upper_lsn of the touched keys, in LSN order, with the columns an event did not carry filled
    from the key's previous event (an insert starts afresh: what it does not carry is NULL). -#}
{% macro _mart_changes(t, window=none) -%}
    {%- if sqlserver_cdc._recomputes_keys(t) %}
    {%- set non_key = sqlserver_cdc._non_key_columns(t) %}
    select
        commit_lsn, change_lsn, command_id, operation_code, update_mask, commit_time,
        {%- for k in t.key %}
        {{ k }},
        {%- endfor %}
        {%- for c in non_key %}
        _filled_{{ c }}.v as {{ c }}{{ ',' if not loop.last }}
        {%- endfor %}
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
            cross join bounds
            {%- if is_incremental() %}
            left semi join touched
                on {{ sqlserver_cdc._key_match(t, 'staged', 'touched') }}
            {%- endif %}
            where staged.quarantine_reason is null
                and staged.commit_lsn <= bounds.upper_lsn
        )
        window carried as (
            partition by {{ t.key | join(', ') }}, _life order by commit_lsn, change_lsn
            rows between unbounded preceding and current row
        )
    )
    {%- else %}
    {%- set literal_window = window and not window.empty %}
    select staged.*, commit_times.tran_end_time as commit_time
    from {{ sqlserver_cdc._staging_ref(t) }} as staged
    cross join bounds
    left join (
        select start_lsn, tran_end_time
        from {{ ref('stg_cdc_metadata__lsn_time_mapping') }}
        where quarantine_reason is null
        {%- if literal_window %}
            and start_lsn > '{{ window.lower }}' and start_lsn <= '{{ window.upper }}'
        {%- endif %}
    ) as commit_times
        on staged.commit_lsn = commit_times.start_lsn
    where
        {%- if literal_window %}
        staged.commit_lsn > '{{ window.lower }}'
        and staged.commit_lsn <= '{{ window.upper }}'
        and
        {%- endif %}
        staged.quarantine_reason is null
        and staged.commit_lsn > bounds.lower_lsn
        and staged.commit_lsn <= bounds.upper_lsn
    {%- endif %}
{%- endmacro %}

{#- Gap detection: the mart needs every change after its watermark. If the capture instance's
    validity interval (cdc.change_tables.start_lsn of the latest landed export) now starts above
    the next LSN the mart needs, cleanup removed changes the mart never processed: fail the model
    with the table, the missing range and the remedy instead of silently skipping them. -#}
{% macro _assert_no_gap(t, lower, available) -%}
    {%- set needed = sqlserver_cdc.lsn_increment(lower) -%}
    (case
        when {{ lower }} != '' and {{ needed }} < coalesce({{ available }}, '')
            then raise_error(concat(
                'gap detected for tracked table {{ t.name }} ({{ this.identifier }}): it needs changes from LSN ',
                {{ needed }}, ' but capture instance {{ t.capture_instance }} now starts at ', {{ available }},
                '; changes ', {{ needed }}, ' to ', {{ sqlserver_cdc.lsn_decrement(available) }},
                ' were removed by cleanup before they were processed. Land a new snapshot and rebuild',
                ' with: python -m runner run --full-refresh'
            ))
        else true
    end)
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
    case {{ code }} when 1 then 'delete' when 2 then 'insert' when 4 then 'update' end
{%- endmacro %}

{#- The marts are applied by MERGE (incremental_strategy merge on a table format with MERGE:
    delta; iceberg and hudi untested): an incremental run returns only the rows to change and
    mart_merge_sql applies them, deletes included, in one commit. Any other strategy is a compile
    error naming the model and the fix (checked at execution: at parse time dbt has not yet
    applied the project's configs). -#}
{% macro _require_merge(t) -%}
    {%- set strategy = config.get('incremental_strategy') -%}
    {%- set file_format = config.get('file_format') -%}
    {%- if execute and (strategy != 'merge' or file_format not in ('delta', 'iceberg', 'hudi')) -%}
        {{ exceptions.raise_compiler_error("tracked table '" ~ t.name ~ "' (" ~ this.identifier ~ "): marts are applied by MERGE; configure incremental_strategy: merge and file_format: delta (got incremental_strategy " ~ strategy ~ ", file_format " ~ file_format ~ "; see README \"Storage: Delta Lake\")") }}
    {%- endif -%}
{%- endmacro %}
