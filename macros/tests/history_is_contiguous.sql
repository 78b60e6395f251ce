{#- Generic test on a history mart: per key, each version's valid_to_lsn is the next version's
    valid_from_lsn or, for the last version, NULL unless a delete closed it (then it is not
    current); at most one current version. Fails with the offending versions. -#}
{% test history_is_contiguous(model, key) %}
    with versions as (
        select
            {{ key | join(', ') }},
            valid_from_lsn,
            valid_to_lsn,
            is_current,
            is_deleted,
            lead(valid_from_lsn) over (partition by {{ key | join(', ') }} order by valid_from_lsn) as next_from
        from {{ model }}
    )
    select * from versions
    where valid_to_lsn <= valid_from_lsn
        or (next_from is not null and valid_to_lsn is null)
        or (next_from is not null and valid_to_lsn > next_from)
        or (is_current and (valid_to_lsn is not null or is_deleted))
{% endtest %}
