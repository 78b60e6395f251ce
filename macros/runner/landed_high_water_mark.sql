{#- Used by the runner to fix one upper bound per run before models run: the largest valid
    commit LSN landed in cdc.lsn_time_mapping, read from the raw landing table (the staging views
    may not exist yet on a first run). -#}
{% macro landed_high_water_mark() -%}
    select max({{ sqlserver_cdc.lsn_normalize("row_values['start_lsn']") }}) as upper_lsn
    from {{ source('cdc_raw', 'landed_rows') }}
    where landing_kind = 'cdc_metadata' and entity = 'lsn_time_mapping'
{%- endmacro %}
