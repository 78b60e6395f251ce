{#- The run's upper LSN bound for a channel's tables. In a runner's build (var cdc_runner) the
    bound its begin_run recorded in the run ledger. Otherwise var cdc_upper_lsn when set (one LSN
    for every channel or a mapping channel -> LSN), else: change tables use the capture
    high-water mark landed in lsn_time_mapping, held at the export cut the last runner run
    recorded (see _capped_by_export_cut); CES and Debezium the largest commit LSN landed (see
    _landed_upper_lsn). -#}
{% macro upper_lsn(channel='change_tables') -%}
    {{ return(adapter.dispatch('upper_lsn', 'sqlserver_cdc')(channel=channel)) }}
{%- endmacro %}

{% macro spark__upper_lsn(channel='change_tables') -%}
    {%- set value = var('cdc_upper_lsn', none) -%}
    {%- if value is mapping -%}
        {%- set value = value.get(channel) -%}
    {%- endif -%}
    {%- if var('cdc_runner', false) %}
    {{ sqlserver_cdc._ledger_bound('upper_lsn', channel) }}
    {%- elif value is none -%}
        {%- if channel == 'change_tables' %}
    -- depends_on: {{ ref('stg_cdc_metadata__lsn_time_mapping') }}
    {{ sqlserver_cdc._capped_by_export_cut(sqlserver_cdc.max_lsn()) }}
        {%- else %}
    ({{ sqlserver_cdc._landed_upper_lsn(channel) }})
        {%- endif -%}
    {%- else -%}
        {%- if not modules.re.match('^[0-9A-F]{20}$', value | string) -%}
            {{ exceptions.raise_compiler_error("var cdc_upper_lsn must be a canonical LSN (20 uppercase hex digits) or a mapping of channel to such LSNs; got '" ~ value ~ "'") }}
        {%- endif %}
    '{{ value }}'
    {%- endif -%}
{%- endmacro %}

{% macro default__upper_lsn(channel='change_tables') -%}
    {{ exceptions.raise_compiler_error(sqlserver_cdc._not_supported('upper_lsn')) }}
{%- endmacro %}

{#- The largest commit LSN landed for an event channel, read from the raw landing table (CES: the
    LSN part of each event's logicalid, which every segment carries; Debezium: the commit LSN of
    every complete event, snapshot rows included). -#}
{% macro _landed_upper_lsn(channel) -%}
    {%- if channel == 'debezium' %}
    select max(commit_lsn)
    from ({{ sqlserver_cdc.debezium_events(sqlserver_cdc._raw_landed_rows()) }}) as landed_events
    where status = 'complete'
    {%- else %}
    select max(upper(element_at(split(row_values['logicalid'], ':'), -2)))
    from {{ sqlserver_cdc._raw_landed_rows() }}
    where landing_kind = '{{ channel }}'
        and row_values['logicalid'] rlike '{{ sqlserver_cdc._ces_logicalid_pattern() }}'
    {%- endif %}
{%- endmacro %}

{#- The last landing batch a run of an event channel's marts takes in: in a runner's build (var
    cdc_runner) the one its begin_run recorded in the run ledger, else var cdc_upper_batch (one
    per channel, or one for all), else the latest batch that landed events of the channel. -#}
{% macro upper_batch(channel) -%}
    {{ return(adapter.dispatch('upper_batch', 'sqlserver_cdc')(channel=channel)) }}
{%- endmacro %}

{% macro spark__upper_batch(channel) -%}
    {%- set value = var('cdc_upper_batch', none) -%}
    {%- if value is mapping -%}
        {%- set value = value.get(channel) -%}
    {%- endif -%}
    {%- if var('cdc_runner', false) -%}
    {{ sqlserver_cdc._ledger_bound('upper_batch', channel) }}
    {%- elif value is none -%}
    (select max(_batch_id) from {{ sqlserver_cdc._raw_landed_rows() }} where landing_kind = '{{ channel }}')
    {%- else -%}
    '{{ value | replace("'", "") }}'
    {%- endif -%}
{%- endmacro %}

{% macro default__upper_batch(channel) -%}
    {{ exceptions.raise_compiler_error(sqlserver_cdc._not_supported('upper_batch')) }}
{%- endmacro %}

{#- The raw landing table by name (source cdc_raw.landed_rows), usable in hooks, where source()
    is not. -#}
{% macro _raw_landed_rows() -%}
    {{ var('cdc_raw_schema', target.schema ~ '_raw') }}.landed_rows
{%- endmacro %}

{#- `expr` (the change-table capture high-water mark), held at the cut export manifests allow
    (docs/landing.md "Export manifests") for a plain dbt build: the smallest exported LSN, as the last
    runner run recorded it in the ledger, of the declared capture instances with manifests (with
    var cdc_export_manifests 'required', an instance without any holds every mart: NULL). Read
    when a build executes; otherwise, and when no runner run recorded exports, `expr` as is. -#}
{% macro _capped_by_export_cut(expr) -%}
    {%- set cut = namespace(lsn=none) -%}
    {%- if execute and flags.WHICH in ('run', 'build', 'retry') -%}
        {%- set ledger = sqlserver_cdc.ledger_relation() -%}
        {%- if run_query("show tables in " ~ ledger.schema ~ " like '" ~ ledger.identifier ~ "'").rows | length > 0
            and 'exported_lsn' in run_query('describe table ' ~ ledger).columns[0].values() -%}
            {%- set exported = sqlserver_cdc._json_map(run_query("select to_json(max_by(exported_lsn, run_id)) from " ~ ledger
                ~ " where status != 'running'").rows[0][0]) -%}
            {%- set required = sqlserver_cdc._export_manifests_required() -%}
            {%- for name, table in var('cdc_tracked_tables', {}).items() if table.get('channel', 'change_tables') == 'change_tables' -%}
                {%- set reached = sqlserver_cdc._table_exported(sqlserver_cdc.tracked_table(name), exported) -%}
                {%- if (reached is not none or (required and exported)) and (cut.lsn is none or (reached or '') < cut.lsn) -%}
                    {%- set cut.lsn = reached or '' -%}
                {%- endif -%}
            {%- endfor -%}
        {%- endif -%}
    {%- endif -%}
    {%- if cut.lsn is none -%}
    {{ expr }}
    {%- elif cut.lsn == '' -%}
    cast(null as string)
    {%- else -%}
    (select if(high_water_mark is null or high_water_mark <= '{{ cut.lsn }}', high_water_mark, '{{ cut.lsn }}') from (select {{ expr }} as high_water_mark) as captured)
    {%- endif -%}
{%- endmacro %}
