{#- Private helpers shared by the current-state and history marts. -#}

{#- The staging model of a tracked table: stg_<channel>__<table>. -#}
{% macro _staging_ref(t) -%}
    {{ return(ref('stg_' ~ t.channel ~ '__' ~ t.name)) }}
{%- endmacro %}

{#- The partition a key lives in: the marts are partitioned by it so an incremental run rewrites
    only the partitions its changes touch (parquet has no MERGE). -#}
{% macro _bucket(t, prefix='') -%}
    pmod(xxhash64({% for k in t.key %}{{ prefix }}{{ k }}{{ ', ' if not loop.last }}{% endfor %}), {{ t.buckets }})
{%- endmacro %}

{#- The run's window as one row (lower_lsn, upper_lsn), computed once per mart run: lower is
    the mart's watermark ('' on a first or full-refresh run), upper the run's bound. On an
    incremental run it also checks for a gap (see _assert_no_gap) before anything is applied. -#}
{% macro _mart_bounds(t) -%}
    -- depends_on: {{ ref('stg_cdc_metadata__change_tables') }}
    select
        lower_lsn,
        upper_lsn
    from (
        select
            {{ sqlserver_cdc.mart_lower_lsn() if is_incremental() else "''" }} as lower_lsn,
            {{ sqlserver_cdc.upper_lsn() }} as upper_lsn,
            {{ sqlserver_cdc.min_lsn(t.capture_instance) }} as available_lsn
    )
    {%- if is_incremental() %}
    where {{ sqlserver_cdc._assert_no_gap(t, 'lower_lsn', 'available_lsn') }}
    {%- endif %}
{%- endmacro %}

{#- The window of an incremental mart run, asked at execution time: {lower, upper, empty}, empty
    when the watermark has reached the run's upper bound (or nothing is mapped yet). none at
    parse time (the full SQL is rendered then, so its refs are recorded) and on full refresh.
    An empty window selects no rows without reading any change, so a table with no new changes
    costs one small query and an empty insert; a non-empty one is also applied as literals,
    which Spark filters on before decoding the rest of each staged row. -#}
{% macro _mart_window() -%}
    {%- if not execute or not is_incremental() -%}
        {{ return(none) }}
    {%- endif -%}
    {%- set query -%}
        select lower_lsn, upper_lsn, coalesce(lower_lsn >= upper_lsn, true) as empty
        from (select {{ sqlserver_cdc.mart_lower_lsn() }} as lower_lsn, {{ sqlserver_cdc.upper_lsn() }} as upper_lsn)
    {%- endset -%}
    {%- set row = run_query(query).rows[0] -%}
    {{ return({'lower': row[0], 'upper': row[1], 'empty': row[2]}) }}
{%- endmacro %}

{#- Changes a mart run processes: trusted staged rows with lower_lsn < commit_lsn <= upper_lsn. -#}
{% macro _mart_changes(t, window=none) -%}
    select staged.*
    from {{ sqlserver_cdc._staging_ref(t) }} as staged
    cross join bounds
    where
        {%- if window and not window.empty %}
        staged.commit_lsn > '{{ window.lower }}'
        and staged.commit_lsn <= '{{ window.upper }}'
        and
        {%- endif %}
        staged.quarantine_reason is null
        and staged.commit_lsn > bounds.lower_lsn
        and staged.commit_lsn <= bounds.upper_lsn
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

{#- True when this incremental run of a mart is applied with MERGE (incremental_strategy: merge,
    on delta / iceberg / hudi): the model then returns only the rows to change, and
    sqlserver_cdc.mart_merge_sql applies them, deletes included. -#}
{% macro _mart_merges() -%}
    {{ return(is_incremental() and config.get('incremental_strategy') == 'merge') }}
{%- endmacro %}
