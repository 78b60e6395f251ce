{#- An update mask as binary: binary input is kept, text ('0x0102', '0102') is decoded.
    Malformed text gives NULL; update_mask_invalid_reason() names it for quarantine. -#}
{% macro update_mask_normalize(expr) -%}
    {{ return(adapter.dispatch('update_mask_normalize', 'sqlserver_cdc')(expr)) }}
{%- endmacro %}

{% macro spark__update_mask_normalize(expr) -%}
    (case
        when typeof({{ expr }}) = 'binary' then try_cast({{ expr }} as binary)
        when trim(cast({{ expr }} as string)) rlike '^(0[xX])?([0-9A-Fa-f]{2})+$'
            then unhex(regexp_replace(trim(cast({{ expr }} as string)), '^0[xX]', ''))
    end)
{%- endmacro %}

{% macro default__update_mask_normalize(expr) -%}
    {{ exceptions.raise_compiler_error(sqlserver_cdc._not_supported('update_mask_normalize')) }}
{%- endmacro %}

{% macro update_mask_invalid_reason(expr, field_name, normalized=none) -%}
    {{ return(adapter.dispatch('update_mask_invalid_reason', 'sqlserver_cdc')(expr=expr, field_name=field_name, normalized=normalized)) }}
{%- endmacro %}

{% macro spark__update_mask_invalid_reason(expr, field_name, normalized=none) -%}
    (case when {{ expr }} is not null and {{ normalized or sqlserver_cdc.update_mask_normalize(expr) }} is null
        then concat('invalid update mask in {{ field_name }}: ', cast({{ expr }} as string)) end)
{%- endmacro %}

{% macro default__update_mask_invalid_reason(expr, field_name, normalized=none) -%}
    {{ exceptions.raise_compiler_error(sqlserver_cdc._not_supported('update_mask_invalid_reason')) }}
{%- endmacro %}
