-- The seeds document what the macros do; this fails with every row where they disagree. A check
-- of the package's own files, not of landed data: the audit and plain dbt test / build run it, a
-- runner run (which loads the seeds when they change) leaves it out.
{{ config(tags=['cdc_audit']) }}
{%- set codes = sqlserver_cdc.operation_codes() %}
with

macro_operations as (
    {%- for channel, mapping in codes.items() %}
    {%- set outer_loop = loop %}
    {%- for code in mapping %}
    select
        '{{ channel }}' as channel,
        '{{ code }}' as code,
        {{ sqlserver_cdc.decode_operation("'" ~ code ~ "'", channel) }} as operation,
        {{ sqlserver_cdc.operation_number(sqlserver_cdc.decode_operation("'" ~ code ~ "'", channel)) }}
            as operation_code
    {{ 'union all' if not (loop.last and outer_loop.last) }}
    {%- endfor %}
    {%- endfor %}
),

seed_operations as (
    select channel, code, operation, operation_code from {{ ref('cdc_operations') }}
),

operation_differences as (
    (select 'macro only' as side, * from macro_operations except select 'macro only', * from seed_operations)
    union all
    (select 'seed only' as side, * from seed_operations except select 'seed only', * from macro_operations)
),

type_examples as (
    select sqlserver_type, spark_type,
        replace(replace(replace(sqlserver_type, '(p,s)', '(12,3)'), '(n)', '(20)'), '(max)', '(max)') as example
    from {{ ref('sqlserver_types') }}
),

macro_types as (
    {%- set examples = ['bigint', 'int', 'smallint', 'tinyint', 'bit', 'decimal(12,3)', 'numeric(12,3)', 'money',
        'smallmoney', 'float', 'real', 'date', 'datetime', 'datetime2(20)', 'smalldatetime', 'datetimeoffset', 'time',
        'char(20)', 'varchar(20)', 'nchar(20)', 'nvarchar(20)', 'text', 'ntext', 'xml', 'sysname', 'uniqueidentifier',
        'binary(20)', 'varbinary(20)', 'image', 'timestamp', 'rowversion'] %}
    {%- for example in examples %}
    select '{{ example }}' as example, '{{ sqlserver_cdc.spark_type(example) }}' as macro_spark_type
    {{ 'union all' if not loop.last }}
    {%- endfor %}
),

type_differences as (
    select
        'type' as side,
        coalesce(type_examples.sqlserver_type, macro_types.example) as channel,
        type_examples.spark_type as code,
        macro_types.macro_spark_type as operation,
        cast(null as int) as operation_code
    from type_examples
    full outer join macro_types on type_examples.example = macro_types.example
    where type_examples.example is null
        or macro_types.example is null
        or replace(type_examples.spark_type, '(p,s)', '(12,3)') != macro_types.macro_spark_type
)

select * from operation_differences
union all
select * from type_differences
