{#- Generic test: `columns` form a primary key: no NULL part, no value occurring twice. Fails with
    the offending key values, how often each occurs and why (`failure`: 'duplicated' or 'NULL
    part'). With `counted_where`, only rows meeting that condition count (a staging table's
    trusted rows: quarantined copies are neither duplicates nor incomplete keys). Use the test's
    `config: where:` to restrict the rows read (docs/operations.md "Checks: batch and audit"). Columns in
    `nullable` may be NULL (a NULL counts as a value: staging's capture_instance of snapshot rows). -#}
{% test primary_key(model, columns, counted_where=none, nullable=[]) %}
    {%- set null_part -%}
        {% for c in columns if c not in nullable %}{{ c }} is null{{ ' or ' if not loop.last }}{% endfor %}
    {%- endset %}
    select
        {{ columns | join(', ') }},
        count(*) as occurrences,
        if({{ null_part }}, 'NULL part', 'duplicated') as failure
    from {{ model }}
    {%- if counted_where is not none %}
    where {{ counted_where }}
    {%- endif %}
    group by {{ columns | join(', ') }}
    having count(*) > 1 or {{ null_part }}
{% endtest %}
