{#- Generic test: the combination of `columns` is unique. Fails with the duplicated key values
    (use the test's `config: where:` to restrict the rows). With `counted_where`, only rows
    meeting that condition count, and it is evaluated only for the rows whose key values occur
    more than once: on a staging view, whose trust check decodes every value, the whole table
    is then read for the key columns alone. -#}
{% test unique_key(model, columns, counted_where=none) %}
    {%- if counted_where is none %}
    select {{ columns | join(', ') }}, count(*) as duplicates
    from {{ model }}
    group by {{ columns | join(', ') }}
    having count(*) > 1
    {%- else %}
    with candidates as (
        select {{ columns | join(', ') }}
        from {{ model }}
        group by {{ columns | join(', ') }}
        having count(*) > 1
    )

    select
        {%- for c in columns %}
        rows.{{ c }},
        {%- endfor %}
        count_if({{ counted_where }}) as duplicates
    from (select * from {{ model }}) as rows
    left semi join candidates
        on {% for c in columns %}rows.{{ c }} <=> candidates.{{ c }}{{ ' and ' if not loop.last }}{% endfor %}
    group by {% for c in columns %}rows.{{ c }}{{ ', ' if not loop.last }}{% endfor %}
    having count_if({{ counted_where }}) > 1
    {%- endif %}
{% endtest %}
