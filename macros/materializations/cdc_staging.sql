{#- The materialization of typed staging (docs/marts.md "Typed staging"): one statement per build.
    The model's SQL selects the rows of the landing batches its window takes in (cdc_window,
    _landed_since); a window with no batch to take in (a full refresh builds every model) runs
    nothing. A full window (first build, --restage) creates or replaces the Delta
    table from them; otherwise they are appended by name (with unique_key: merged, the stored
    rows they settle updated; incremental_predicates limit the stored rows the MERGE reads), or,
    when the table's declaration changed since the last build, merged with schema evolution so
    a newly declared column is added. A unique key matches NULL to NULL (the default database's
    source_database). Nothing else runs: no describe, no temporary view. -#}
{% materialization cdc_staging, adapter='spark' -%}
    {%- set window = sqlserver_cdc.cdc_window() -%}
    {%- set target_relation = this.incorporate(type='table') -%}
    {%- set unique_key = config.get('unique_key') -%}
    {%- set predicates = config.get('incremental_predicates') or [] -%}
    {{ run_hooks(pre_hooks) }}
    {%- if window.empty -%}
        {%- call noop_statement('main', 'nothing new landed') -%}{%- endcall -%}
    {%- else -%}
    {%- call statement('main') -%}
        {%- if window.full %}
        {{ sqlserver_cdc._create_or_replace(target_relation, compiled_code) }}
        {%- elif unique_key %}
        {%- set keys = [unique_key] if unique_key is string else unique_key %}
        merge {{ 'with schema evolution ' if window.evolve }}into {{ target_relation }} as DBT_INTERNAL_DEST
        using ({{ compiled_code }}) as DBT_INTERNAL_SOURCE
        on {% for p in predicates %}{{ p }} and {% endfor %}{% for k in keys %}DBT_INTERNAL_SOURCE.{{ k }} <=> DBT_INTERNAL_DEST.{{ k }}{{ ' and ' if not loop.last }}{% endfor %}
        when matched then update set *
        when not matched then insert *
        {%- elif window.evolve %}
        merge with schema evolution into {{ target_relation }} as DBT_INTERNAL_DEST
        using ({{ compiled_code }}) as DBT_INTERNAL_SOURCE
        on false
        when not matched then insert *
        {%- else %}
        insert into {{ target_relation }} by name
        select * from ({{ compiled_code }}) as staged
        {%- endif %}
    {%- endcall -%}
    {%- endif -%}
    {{ run_hooks(post_hooks) }}
    {% do persist_docs(target_relation, model) %}
    {{ return({'relations': [target_relation]}) }}
{%- endmaterialization %}

{#- A Delta table created or replaced from a query, with the model's tblproperties. -#}
{% macro _create_or_replace(relation, query) -%}
    {%- set properties = config.get('tblproperties') or {} -%}
    create or replace table {{ relation }}
    using delta
    {%- if properties %}
    tblproperties ({% for k, v in properties.items() %}'{{ k }}' = '{{ v }}'{{ ', ' if not loop.last }}{% endfor %})
    {%- endif %}
    as {{ query }}
{%- endmacro %}
