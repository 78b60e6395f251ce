{#- Generic test: the model and compare_model hold the same multiset of rows over `columns`
    (all columns when omitted); compare_where filters compare_model (the test's own
    `config: where:` filters the model). Fails with the rows found on one side only. -#}
{% test equal_rowsets(model, compare_model, columns=none, compare_where=none) %}
    {%- set cols = columns | join(', ') if columns else '*' -%}
    with
    a as (select {{ cols }}, count(*) as _n from {{ model }} group by all),
    b as (
        select {{ cols }}, count(*) as _n from {{ compare_model }}
        {%- if compare_where %} where {{ compare_where }}{% endif %}
        group by all
    ),
    only_a as (select 'only in model' as side, * from (select * from a except select * from b)),
    only_b as (select 'only in compare_model' as side, * from (select * from b except select * from a))
    select * from only_a
    union all
    select * from only_b
{% endtest %}
