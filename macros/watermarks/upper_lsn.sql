{#- The run's upper LSN bound: var cdc_upper_lsn (the runner passes one bound for every table),
    else the capture high-water mark landed in lsn_time_mapping. -#}
{% macro upper_lsn() -%}
    {%- set value = var('cdc_upper_lsn', none) -%}
    -- depends_on: {{ ref('stg_cdc_metadata__lsn_time_mapping') }}
    {%- if value is none %}
    {{ sqlserver_cdc.max_lsn() }}
    {%- else -%}
        {%- if not modules.re.match('^[0-9A-F]{20}$', value | string) -%}
            {{ exceptions.raise_compiler_error("var cdc_upper_lsn must be a canonical LSN (20 uppercase hex digits); got '" ~ value ~ "'") }}
        {%- endif %}
    '{{ value }}'
    {%- endif -%}
{%- endmacro %}
