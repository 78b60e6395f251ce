{#- Aggregate: bitwise OR of update masks, right-aligned as SQL Server's masks are (ordinal 1 in
    the last byte), so masks of different lengths combine correctly. The result is as long as the
    longest mask. max_bytes bounds the mask length (varbinary(128) in SQL Server). NULLs are ignored;
    all NULL gives NULL. Works in 7-byte chunks so each fits a bigint. -#}
{% macro bit_or_masks(mask, max_bytes=128) -%}
    {{ return(adapter.dispatch('bit_or_masks', 'sqlserver_cdc')(mask, max_bytes)) }}
{%- endmacro %}

{% macro spark__bit_or_masks(mask, max_bytes) -%}
    {%- set chunks = ((max_bytes + 6) // 7) | int -%}
    {%- set width = chunks * 14 -%}
    {%- set padded = "lpad(hex(" ~ mask ~ "), " ~ width ~ ", '0')" -%}
    (case when max(octet_length({{ mask }})) is not null then substr(unhex(concat(
        {%- for i in range(chunks) %}
        lpad(hex(bit_or(cast(conv(substr({{ padded }}, {{ i * 14 + 1 }}, 14), 16, 10) as bigint))), 14, '0'){{ "," if not loop.last }}
        {%- endfor %}
    )), {{ chunks * 7 + 1 }} - max(octet_length({{ mask }})), max(octet_length({{ mask }}))) end)
{%- endmacro %}

{% macro default__bit_or_masks(mask, max_bytes) -%}
    {{ exceptions.raise_compiler_error(sqlserver_cdc._not_supported('bit_or_masks')) }}
{%- endmacro %}
