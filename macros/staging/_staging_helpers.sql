{#- Private helpers shared by the staging macros of every channel. -#}

{#- The declared columns cast to their Spark types from text_<column>. -#}
{% macro _typed_columns(t) -%}
    {%- for c in t.columns %}
    {{ sqlserver_cdc.cast_from_text('text_' ~ c.name, c.type) }} as {{ c.name }}{{ ',' if not loop.last }}
    {%- endfor %}
{%- endmacro %}

{#- Quarantine reasons of the declared columns (for concat_ws): a value that does not cast, a key
    column without a value. -#}
{% macro _column_reasons(t, missing_key='is NULL') -%}
    {%- for c in t.columns %}
    {{ sqlserver_cdc.cast_invalid_reason('text_' ~ c.name, c.type, c.name, typed=c.name) }},
    {%- endfor %}
    {%- for k in t.key %}
    case when text_{{ k }} is null then 'key column {{ k }} {{ missing_key }}' end{{ ',' if not loop.last }}
    {%- endfor %}
{%- endmacro %}
