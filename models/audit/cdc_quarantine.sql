-- Every landed record the pipeline could not trust, with the reason, across all tracked tables
-- and the CDC metadata. Good rows of the same files flow on; these wait here for a person.
-- (With many tables declared the branches go into part views: macros/audit/quarantine.sql.)
{{ config(pre_hook="{{ sqlserver_cdc._quarantine_part_views() }}") }}
{%- set parts = sqlserver_cdc._quarantine_parts(sqlserver_cdc._quarantine_branches()) %}

with

final as (
    {%- if parts | length == 1 %}
        {{ parts[0] | join(' union all ') }}  -- noqa: LT02, LT05
    {%- else %}
        {%- for part in parts %}
        select * from {{ sqlserver_cdc._quarantine_part(loop.index) }}
        {%- if not loop.last %}
        union all
        {%- endif %}
        {%- endfor %}
    {%- endif %}
)

select * from final
