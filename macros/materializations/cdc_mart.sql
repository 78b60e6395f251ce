{#- The materialization of the marts (docs/marts.md "Marts"): one statement per build. A full
    window (first build, full refresh, the other mart missing) creates or replaces the Delta
    table from the model's rows; a window with nothing in it runs nothing; otherwise the rows
    (the changes of the window) are applied by one MERGE (mart_merge_sql, deletes included), with
    schema evolution when the table's declaration changed since the last build. -#}
{% materialization cdc_mart, adapter='spark' -%}
    {%- set window = sqlserver_cdc.cdc_window() -%}
    {%- set meta = config.get('meta') or {} -%}
    {%- set target_relation = this.incorporate(type='table') -%}
    {{ run_hooks(pre_hooks) }}
    {%- if window.empty and not window.full -%}
        {%- call noop_statement('main', 'nothing in its window') -%}{%- endcall -%}
    {%- else -%}
        {%- call statement('main') -%}
            {%- if window.full %}
            {{ sqlserver_cdc._create_or_replace(target_relation, compiled_code) }}
            {%- else %}
            {{ sqlserver_cdc.mart_merge_sql(target_relation, '(' ~ compiled_code ~ ')', meta.cdc_table, meta.cdc_mart, evolve=window.evolve) }}
            {%- endif %}
        {%- endcall -%}
    {%- endif -%}
    {{ run_hooks(post_hooks) }}
    {% do persist_docs(target_relation, model) %}
    {{ return({'relations': [target_relation]}) }}
{%- endmaterialization %}
