{#- The cdc_quarantine view (models/audit/cdc_quarantine.sql): one branch per staging model that
    quarantines rows, joined by UNION ALL. The embedded metastore (Hive's schema on Derby) keeps a
    view's text in a LONG VARCHAR of at most 32,700 characters, which about 100 declared tables
    exceed; so when the branches' text is longer than var cdc_quarantine_view_chars (default
    30,000), they go into part views (cdc_quarantine__part<N>) of at most that much each, created
    by the view's pre-hook, and the view reads the parts. -#}

{% macro _quarantine_branches() -%}
    {#- One SELECT per staging model: the tracked table's name (NULL for the CDC metadata and the
        event streams), the reason and the landed record. -#}
    {%- set staged = [] -%}
    {%- for name, table in var('cdc_tracked_tables', {}).items() -%}
        {%- do staged.append(("'" ~ name ~ "'", 'stg_' ~ table.channel ~ '__' ~ name)) -%}
    {%- endfor -%}
    {%- do staged.append(('cast(null as string)', 'stg_cdc_metadata__lsn_time_mapping')) -%}
    {%- do staged.append(('cast(null as string)', 'stg_cdc_metadata__change_tables')) -%}
    {%- for channel in ['ces', 'debezium'] if sqlserver_cdc.channel_declared(channel) -%}
        {%- do staged.append(('cast(null as string)', 'stg_' ~ channel ~ '__events')) -%}
    {%- endfor -%}
    {%- set branches = [] -%}
    {%- for tracked_table, model in staged -%}
        {%- do branches.append('select ' ~ tracked_table ~ ' as tracked_table, quarantine_reason, landed_record,'
            ~ ' _source_file, _batch_id, _ingested_at from ' ~ ref(model) ~ ' where quarantine_reason is not null') -%}
    {%- endfor -%}
    {{- return(branches) -}}
{%- endmacro %}

{% macro _quarantine_parts(branches) -%}
    {#- The branches in order, in groups whose text (joined by UNION ALL) stays within
        var cdc_quarantine_view_chars; one group when all of it does. -#}
    {%- set limit = var('cdc_quarantine_view_chars', 30000) | int -%}
    {%- set parts = [[]] -%}
    {%- set size = namespace(chars=0) -%}
    {%- for branch in branches -%}
        {%- if parts[-1] and size.chars + branch | length + 11 > limit -%}
            {%- do parts.append([]) -%}
            {%- set size.chars = 0 -%}
        {%- endif -%}
        {%- do parts[-1].append(branch) -%}
        {%- set size.chars = size.chars + branch | length + 11 -%}
    {%- endfor -%}
    {{- return(parts) -}}
{%- endmacro %}

{% macro _quarantine_part(n) -%}
    {{- return(api.Relation.create(schema=this.schema, identifier=this.identifier ~ '__part' ~ n, type='view')) -}}
{%- endmacro %}

{% macro _quarantine_part_views() -%}
    {#- The pre-hook of cdc_quarantine: creates its part views when it has more than one part, and
        drops the part views no longer read (the tables declared shrank). Returns no SQL. -#}
    {%- if execute -%}
        {%- set parts = sqlserver_cdc._quarantine_parts(sqlserver_cdc._quarantine_branches()) -%}
        {%- set used = [] -%}
        {%- if parts | length > 1 -%}
            {%- for part in parts -%}
                {%- set relation = sqlserver_cdc._quarantine_part(loop.index) -%}
                {%- do used.append(relation.identifier | lower) -%}
                {%- do run_query('create or replace view ' ~ relation ~ ' as ' ~ part | join(' union all ')) -%}
            {%- endfor -%}
        {%- endif -%}
        {%- for row in run_query("show views in " ~ this.schema ~ " like '" ~ this.identifier ~ "__part*'") -%}
            {%- if row[1] | lower not in used -%}
                {%- do run_query('drop view if exists ' ~ this.schema ~ '.' ~ row[1]) -%}
            {%- endif -%}
        {%- endfor -%}
    {%- endif -%}
{%- endmacro %}
