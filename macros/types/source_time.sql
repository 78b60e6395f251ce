{#- The source server's time zone (var cdc_source_time_zone, default UTC; docs/tables.md "Time
    zones"): an IANA name (Europe/Berlin, America/New_York) or a fixed offset (+05:30). Refuses
    anything else, naming the var. -#}
{% macro _source_time_zone() -%}
    {%- set tz = var('cdc_source_time_zone', 'UTC') | string -%}
    {%- if tz in ('UTC', 'Etc/UTC', 'Z', '+00:00') -%}{{ return('UTC') }}{%- endif -%}
    {%- if tz not in modules.pytz.all_timezones and not modules.re.fullmatch('[+-](0[0-9]|1[0-4]):[0-5][0-9]', tz) -%}
        {{ exceptions.raise_compiler_error("var cdc_source_time_zone: '" ~ tz ~ "' is not a time zone; give the SQL Server's "
            ~ "time zone as an IANA name (e.g. Europe/Berlin, America/New_York) or a fixed offset (e.g. +05:30); default UTC") }}
    {%- endif -%}
    {{ return(tz) }}
{%- endmacro %}

{#- A SQL Server wall-clock time (`column`, a timestamp read as written: lsn_time_mapping's
    tran_begin_time and tran_end_time, a CES committime) as UTC, from the source's time zone
    (_source_time_zone; the expression itself when that is UTC). In the hour a fall-back repeats,
    a local time is ambiguous (_source_time_ambiguous): this reads it at the earlier offset
    (summer time); the lsn_time_mapping staging moves the repeated hour's second pass to the later
    one. -#}
{% macro _source_time_to_utc(column) -%}
    {%- set tz = sqlserver_cdc._source_time_zone() -%}
    {{- column if tz == 'UTC' else 'to_utc_timestamp(' ~ column ~ ", '" ~ tz ~ "')" -}}
{%- endmacro %}

{#- Whether a wall-clock `column` falls in the hour a fall-back repeats in the source's time zone
    (false for UTC and fixed offsets). -#}
{% macro _source_time_ambiguous(column) -%}
    {%- set tz = sqlserver_cdc._source_time_zone() -%}
    {{- 'false' if tz == 'UTC' else 'coalesce(from_utc_timestamp(' ~ sqlserver_cdc._source_time_to_utc(column)
        ~ " + interval 1 hour, '" ~ tz ~ "') = " ~ column ~ ', false)' -}}
{%- endmacro %}

{#- The rows of `relation` with tran_begin_time and tran_end_time: its wall-clock columns `begin`
    and `end` as UTC (docs/tables.md "Time zones"). In the hour a fall-back repeats, once an end
    time steps back from an earlier one in `order_by` order (the commit LSN), it and every later
    ambiguous end time of the rows are read at the later offset, so commit times keep LSN order
    (an ambiguous time that never steps back is read at the earlier offset). -#}
{% macro _source_commit_times(relation, begin, end, order_by) -%}
    {%- if sqlserver_cdc._source_time_zone() == 'UTC' -%}
    select *, {{ begin }} as tran_begin_time, {{ end }} as tran_end_time
    from {{ relation }}
    {%- else -%}
    select
        *,
        {{ sqlserver_cdc._source_time_to_utc(begin) }} as tran_begin_time,
        case
            when is_ambiguous and max(cast(steps_back as int)) over (
                order by {{ order_by }} rows between unbounded preceding and current row
            ) = 1
                then utc_end_time + interval 1 hour
            else utc_end_time
        end as tran_end_time
    from (
        select
            *,
            is_ambiguous and utc_end_time < max(utc_end_time) over (
                order by {{ order_by }} rows between unbounded preceding and 1 preceding
            ) as steps_back
        from (
            select
                *,
                {{ sqlserver_cdc._source_time_to_utc(end) }} as utc_end_time,
                {{ sqlserver_cdc._source_time_ambiguous(end) }} as is_ambiguous
            from {{ relation }}
        ) as in_utc
    ) as stepped_back
    {%- endif -%}
{%- endmacro %}
