-- Every captured column of every capture instance declared in var cdc_tracked_tables must have
-- the ordinal SQL Server reports in cdc.captured_columns of each database the table reads (when
-- that metadata was landed): a wrong ordinal would make every update-mask answer wrong. Fails
-- with the disagreeing columns (source_database NULL: the default database).
with

declared as (
    {%- set rows = [] %}
    {%- for name, table in var('cdc_tracked_tables', {}).items() if table.get('channel') == 'change_tables' %}
    {%- set t = sqlserver_cdc.tracked_table(name) %}
    {%- for db in t.databases %}
    {%- for instance in t.instances %}
    {%- for column in instance.columns %}
    {%- do rows.append("select " ~ (sqlserver_cdc._sql_string(db.id) if db.id else 'cast(null as string)') ~ " as source_database, '"
        ~ instance.name | lower ~ "' as capture_instance, "
        ~ sqlserver_cdc._sql_string(column.source | lower) ~ " as column_name, " ~ column.ordinal ~ " as declared_ordinal") %}
    {%- endfor %}
    {%- endfor %}
    {%- endfor %}
    {%- endfor %}
    {%- if not rows %}
    {%- do rows.append("select cast(null as string) as source_database, cast(null as string) as capture_instance, cast(null as string) as column_name, 0 as declared_ordinal where false") %}
    {%- endif %}
    {{ rows | join('\n    union all\n    ') }}
),

landed as (
    select source_database, lower(capture_instance) as capture_instance, lower(column_name) as column_name, column_ordinal
    from {{ ref('stg_cdc_metadata__captured_columns') }}
    where quarantine_reason is null
)

select declared.*, landed.column_ordinal as landed_ordinal
from declared
inner join landed
    on declared.source_database <=> landed.source_database
    and declared.capture_instance = landed.capture_instance
    and declared.column_name = landed.column_name
where declared.declared_ordinal != landed.column_ordinal
