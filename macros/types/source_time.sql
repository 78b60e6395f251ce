{#- The source server's time zone (var cdc_source_time_zone, default UTC; docs/tables.md "Time
    zones"), or `tz` (a database's own, var cdc_databases' time_zone): an IANA name
    (Europe/Berlin, America/New_York) or a fixed offset (+05:30). Refuses anything else, naming
    where it was given. -#}
{% macro _source_time_zone(tz=none, where='var cdc_source_time_zone') -%}
    {%- set tz = (tz if tz is not none else var('cdc_source_time_zone', 'UTC')) | string -%}
    {%- if tz in ('UTC', 'Etc/UTC', 'Z', '+00:00') -%}{{ return('UTC') }}{%- endif -%}
    {%- if tz not in modules.pytz.all_timezones and not modules.re.fullmatch('[+-](0[0-9]|1[0-4]):[0-5][0-9]', tz) -%}
        {{ exceptions.raise_compiler_error(where ~ ": '" ~ tz ~ "' is not a time zone; give the SQL Server's "
            ~ "time zone as an IANA name (e.g. Europe/Berlin, America/New_York) or a fixed offset (e.g. +05:30); default UTC") }}
    {%- endif -%}
    {{ return(tz) }}
{%- endmacro %}

{#- The time zone of each database that declares one of its own (var cdc_databases' time_zone:
    its server's), by database id; the others' is the project's (_source_time_zone). -#}
{% macro _database_time_zones() -%}
    {%- set zones = {} -%}
    {%- for name, db in sqlserver_cdc._databases().items() | sort if db.time_zone is not none -%}
        {%- do zones.update({db.id: sqlserver_cdc._source_time_zone(db.time_zone, "var cdc_databases: database '" ~ name ~ "': time_zone")}) -%}
    {%- endfor -%}
    {{ return(zones) }}
{%- endmacro %}

{#- The time zone a wall-clock time is read in, as SQL: the project's as a literal, or, when
    `database` (a SQL expression of the row's database id, '' the default one) is given and a
    database declares a zone of its own, the row's database's. none when every zone is UTC. -#}
{% macro _zone_of(database=none) -%}
    {%- set project = sqlserver_cdc._source_time_zone() -%}
    {%- set zones = sqlserver_cdc._database_time_zones() if database is not none else {} -%}
    {%- if not zones or zones.values() | reject('equalto', project) | list | length == 0 -%}
        {{ return(none if project == 'UTC' else "'" ~ project ~ "'") }}
    {%- endif -%}
    {%- set sql -%}
    case {{ database }}{% for id, tz in zones.items() | sort %} when '{{ id }}' then '{{ tz }}'{% endfor %} else '{{ project }}' end
    {%- endset -%}
    {{ return(sql) }}
{%- endmacro %}

{#- A SQL Server wall-clock time (`column`, a timestamp read as written: lsn_time_mapping's
    tran_begin_time and tran_end_time, a CES committime) as UTC, from the source's time zone
    (_zone_of: the project's, or the row's database's; the expression itself when it is UTC). In
    the hour a fall-back repeats, a local time is ambiguous (_source_time_ambiguous): this reads
    it at the earlier offset (summer time); the lsn_time_mapping staging moves the repeated hour's
    second pass to the later one. -#}
{% macro _source_time_to_utc(column, database=none) -%}
    {%- set zone = sqlserver_cdc._zone_of(database) -%}
    {{- column if zone is none else 'to_utc_timestamp(' ~ column ~ ', ' ~ zone ~ ')' -}}
{%- endmacro %}

{#- Whether a wall-clock `column` falls in the hour a fall-back repeats in the source's time zone
    (false for UTC and fixed offsets). -#}
{% macro _source_time_ambiguous(column, database=none) -%}
    {%- set zone = sqlserver_cdc._zone_of(database) -%}
    {{- 'false' if zone is none else 'coalesce(from_utc_timestamp(' ~ sqlserver_cdc._source_time_to_utc(column, database)
        ~ ' + interval 1 hour, ' ~ zone ~ ') = ' ~ column ~ ', false)' -}}
{%- endmacro %}

{#- The rows of `relation` with tran_begin_time and tran_end_time: its wall-clock columns `begin`
    and `end` as UTC (docs/tables.md "Time zones"), each database's (`database`: the column of the
    row's database id) in its own zone. In the hour a fall-back repeats, once an end time steps
    back from an earlier one of its database in `order_by` order (the commit LSN), it and every
    later ambiguous end time of the rows are read at the later offset, so commit times keep LSN
    order (an ambiguous time that never steps back is read at the earlier offset). -#}
{% macro _source_commit_times(relation, begin, end, order_by, database=none) -%}
    {%- if sqlserver_cdc._zone_of(database) is none -%}
    select *, {{ begin }} as tran_begin_time, {{ end }} as tran_end_time
    from {{ relation }}
    {%- else -%}
    {%- set by_database = ('partition by ' ~ database ~ ' ') if database is not none else '' -%}
    select
        *,
        {{ sqlserver_cdc._source_time_to_utc(begin, database) }} as tran_begin_time,
        case
            when is_ambiguous and max(cast(steps_back as int)) over (
                {{ by_database }}order by {{ order_by }} rows between unbounded preceding and current row
            ) = 1
                then utc_end_time + interval 1 hour
            else utc_end_time
        end as tran_end_time
    from (
        select
            *,
            is_ambiguous and utc_end_time < max(utc_end_time) over (
                {{ by_database }}order by {{ order_by }} rows between unbounded preceding and 1 preceding
            ) as steps_back
        from (
            select
                *,
                {{ sqlserver_cdc._source_time_to_utc(end, database) }} as utc_end_time,
                {{ sqlserver_cdc._source_time_ambiguous(end, database) }} as is_ambiguous
            from {{ relation }}
        ) as in_utc
    ) as stepped_back
    {%- endif -%}
{%- endmacro %}
