{#- Builds a binary update mask with SQL Server's layout (see is_bit_set) from per-column flags:
    a list of [ordinal, SQL boolean expression] pairs; a flag that is true sets the ordinal's bit.
    The mask has one byte per 8 ordinals up to `width` (default: the highest flagged ordinal),
    like a change table's __$update_mask.
    Used for channels that send no mask (CES: the columns an update carries). -#}
{% macro update_mask_from_flags(flags, width=none) -%}
    {{ return(adapter.dispatch('update_mask_from_flags', 'sqlserver_cdc')(flags, width)) }}
{%- endmacro %}

{% macro spark__update_mask_from_flags(flags, width) -%}
    {%- set n_bytes = ((width or (flags | map(attribute=0) | max)) + 7) // 8 -%}
    unhex(concat(
        {%- for byte in range(n_bytes) %}
        {%- set low = (n_bytes - 1 - byte) * 8 + 1 %}
        lpad(hex(0
            {%- for ordinal, flag in flags if ordinal >= low and ordinal < low + 8 %}
            + case when {{ flag }} then {{ 2 ** (ordinal - low) }} else 0 end
            {%- endfor %}
        ), 2, '0'){{ ',' if not loop.last }}
        {%- endfor %}
    ))
{%- endmacro %}

{% macro default__update_mask_from_flags(flags, width) -%}
    {{ exceptions.raise_compiler_error(sqlserver_cdc._not_supported('update_mask_from_flags')) }}
{%- endmacro %}
