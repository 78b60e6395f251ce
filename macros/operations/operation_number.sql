{#- SQL Server's __$operation number of a canonical operation name (snapshot counts as insert). -#}
{% macro operation_number(operation_expr) -%}
    {{ return(adapter.dispatch('operation_number', 'sqlserver_cdc')(operation_expr)) }}
{%- endmacro %}

{% macro default__operation_number(operation_expr) -%}
    (case {{ operation_expr }}
        when 'delete' then 1 when 'insert' then 2 when 'snapshot' then 2
        when 'update_before' then 3 when 'update_after' then 4
    end)
{%- endmacro %}
