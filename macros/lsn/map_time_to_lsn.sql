{#- sys.fn_cdc_map_time_to_lsn over the landed cdc.lsn_time_mapping (tran_end_time). relation is
    one of 'largest less than', 'largest less than or equal', 'smallest greater than',
    'smallest greater than or equal'. Returns a scalar subquery giving a canonical LSN or NULL. -#}
{% macro map_time_to_lsn(relation, time_expr) -%}
    {{ return(adapter.dispatch('map_time_to_lsn', 'sqlserver_cdc')(relation, time_expr)) }}
{%- endmacro %}

{% macro spark__map_time_to_lsn(relation, time_expr) -%}
    {%- set relations = {
        'largest less than': ('max', '<'),
        'largest less than or equal': ('max', '<='),
        'smallest greater than': ('min', '>'),
        'smallest greater than or equal': ('min', '>='),
    } -%}
    {%- if relation not in relations -%}
        {{ exceptions.raise_compiler_error("map_time_to_lsn: relation must be one of " ~ (relations.keys() | list | join(', ')) ~ "; got '" ~ relation ~ "'") }}
    {%- endif -%}
    {%- set agg, op = relations[relation] -%}
    (select {{ agg }}(start_lsn) from {{ ref('stg_cdc_metadata__lsn_time_mapping') }}
        where tran_end_time {{ op }} {{ time_expr }})
{%- endmacro %}

{% macro default__map_time_to_lsn(relation, time_expr) -%}
    {{ exceptions.raise_compiler_error(sqlserver_cdc._not_supported('map_time_to_lsn')) }}
{%- endmacro %}
