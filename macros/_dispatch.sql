{#- The message of a macro's default__ body where its SQL exists for Spark only (spark__ bodies;
    dbt-databricks falls back to them too): names the macro and the adapter. -#}
{% macro _not_supported(name) -%}
    {{ return("sqlserver_cdc." ~ name ~ " is not supported on adapter " ~ adapter.type() ~ ": its SQL is written for "
        ~ "Spark (spark__" ~ name ~ "); add a " ~ adapter.type() ~ "__" ~ name ~ " macro to support it") }}
{%- endmacro %}
