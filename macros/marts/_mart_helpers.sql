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
    select * from {{ sqlserver_cdc._staging_ref(t) }}
    where quarantine_reason is null
        and commit_lsn <= {{ sqlserver_cdc.upper_lsn() }}
    {%- if is_incremental() %}
        and commit_lsn > {{ sqlserver_cdc.mart_lower_lsn() }}
    {%- endif %}
{%- endmacro %}

{#- key columns equal between two aliases -#}
{% macro _key_match(t, left, right) -%}
    {%- for k in t.key %}{{ left }}.{{ k }} = {{ right }}.{{ k }}{{ ' and ' if not loop.last }}{% endfor -%}
{%- endmacro %}

{% macro _operation_name(code) -%}
    case {{ code }} when 1 then 'delete' when 2 then 'insert' when 4 then 'update' end
{%- endmacro %}
