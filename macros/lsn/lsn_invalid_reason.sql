{#- NULL when the expression is a valid LSN (or NULL and not required), else a message naming
    the field and the offending value: the quarantine reason for the row. -#}
{% macro lsn_invalid_reason(expr, field_name, required=true, normalized=none) -%}
    {{ return(adapter.dispatch('lsn_invalid_reason', 'sqlserver_cdc')(expr, field_name, required, normalized)) }}
{%- endmacro %}

{#- normalized: an expression already holding lsn_normalize(expr) (e.g. a column computed in an
    earlier CTE), so the normalization is not written out twice. -#}
{% macro spark__lsn_invalid_reason(expr, field_name, required, normalized) -%}
    (case
        {%- if required %}
        when {{ expr }} is null then 'missing {{ field_name }}'
        {%- endif %}
        when {{ expr }} is not null and {{ normalized or sqlserver_cdc.lsn_normalize(expr) }} is null
            then concat('invalid LSN in {{ field_name }}: ', {{ sqlserver_cdc._lsn_text(expr) }})
    end)
{%- endmacro %}

{% macro default__lsn_invalid_reason(expr, field_name, required, normalized) -%}
    {{ exceptions.raise_compiler_error(sqlserver_cdc._not_supported('lsn_invalid_reason')) }}
{%- endmacro %}
