-- Every landed record the pipeline could not trust, with the reason, across all tracked tables
-- and the CDC metadata. Good rows of the same files flow on; these wait here for a person.
{%- set staged = [] %}
{%- for name, table in var('cdc_tracked_tables', {}).items() %}
    {%- do staged.append(("'" ~ name ~ "'", 'stg_' ~ table.channel ~ '__' ~ name)) %}
{%- endfor %}
{%- do staged.append(('cast(null as string)', 'stg_cdc_metadata__lsn_time_mapping')) %}
{%- do staged.append(('cast(null as string)', 'stg_cdc_metadata__change_tables')) %}
{%- for channel in ['ces', 'debezium'] if sqlserver_cdc.channel_declared(channel) %}
    {%- do staged.append(('cast(null as string)', 'stg_' ~ channel ~ '__events')) %}
{%- endfor %}

with

final as (
    {%- for tracked_table, model in staged %}
        select
            {{ tracked_table }} as tracked_table,
            quarantine_reason,
            landed_record,
            _source_file,
            _batch_id,
            _ingested_at
        from {{ ref(model) }}
        where quarantine_reason is not null
        {%- if not loop.last %}
            union all
        {%- endif %}
    {%- endfor %}
)

select * from final
