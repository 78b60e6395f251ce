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

{#- Changes a mart run processes: trusted staged rows with watermark < commit_lsn <= upper bound
    (no lower bound on a first or full-refresh run). -#}
{% macro _mart_changes(t) -%}
    -- depends_on: {{ ref('stg_cdc_metadata__change_tables') }}
    select * from {{ sqlserver_cdc._staging_ref(t) }}
    where quarantine_reason is null
        and commit_lsn <= {{ sqlserver_cdc.upper_lsn() }}
    {%- if is_incremental() %}
        and commit_lsn > {{ sqlserver_cdc.mart_lower_lsn() }}
        and (select {{ sqlserver_cdc._assert_no_gap(t) }})
    {%- endif %}
{%- endmacro %}

{#- Gap detection: the mart needs every change after its watermark. If the capture instance's
    validity interval (cdc.change_tables.start_lsn of the latest landed export) now starts above
    the next LSN the mart needs, cleanup removed changes the mart never processed: fail the model
    with the table, the missing range and the remedy instead of silently skipping them. -#}
{% macro _assert_no_gap(t) -%}
    {%- set lower = sqlserver_cdc.mart_lower_lsn() -%}
    {%- set needed = sqlserver_cdc.lsn_increment(lower) -%}
    {%- set available = sqlserver_cdc.min_lsn(t.capture_instance) -%}
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

{#- key columns equal between two aliases -#}
{% macro _key_match(t, left, right) -%}
    {%- for k in t.key %}{{ left }}.{{ k }} = {{ right }}.{{ k }}{{ ' and ' if not loop.last }}{% endfor -%}
{%- endmacro %}

{% macro _operation_name(code) -%}
    case {{ code }} when 1 then 'delete' when 2 then 'insert' when 4 then 'update' end
{%- endmacro %}
