{#- Generic test: the combination of `columns` is unique. Fails with the duplicated key values
    (use the test's `config: where:` to restrict the rows). -#}
{% test unique_key(model, columns) %}
    select {{ columns | join(', ') }}, count(*) as duplicates
    from {{ model }}
    group by {{ columns | join(', ') }}
    having count(*) > 1
{% endtest %}
