{#- Private helpers for tracked tables' databases (docs/tables.md "Several databases"), shared by
    staging and the marts. A database's id is '' for the default one (NULL in the raw table's and
    the metadata staging's source_database), else its declared name; a tenant table's rows carry
    the name (its default database's too) in source_database. -#}

{#- The raw rows (or metadata staging rows) of tracked table t's databases: `column` NULL for the
    default one, its name for another. -#}
{% macro _raw_database_filter(t, column='source_database') -%}
    {%- set ids = t.databases | map(attribute='id') | list -%}
    {%- set named = ids | reject('equalto', '') | list -%}
    {%- set parts = [] -%}
    {%- if '' in ids -%}{%- do parts.append(column ~ ' is null') -%}{%- endif -%}
    {%- if named -%}{%- do parts.append(column ~ " in ('" ~ named | join("', '") ~ "')") -%}{%- endif -%}
    ({{ parts | join(' or ') }})
{%- endmacro %}

{#- A tenant table's source_database value for a raw row of `column`: the database's name (the
    default database's for NULL). -#}
{% macro _database_name_of(t, column='source_database') -%}
    {%- set default = t.databases | selectattr('id', 'equalto', '') | list -%}
    {{- 'coalesce(' ~ column ~ ", '" ~ default[0].name ~ "')" if default else column -}}
{%- endmacro %}

{#- The metadata staging's (or raw table's) source_database value of a database's rows, as a
    SQL predicate on `column`, by the name a tenant row carries (`name_column`, a SQL expression):
    the default database's name matches NULL. For a table of one database, its database. -#}
{% macro _metadata_database_match(t, column, name_column=none) -%}
    {%- if not t.tenant or name_column is none -%}
        {{- sqlserver_cdc._raw_database_filter(t, column) -}}
    {%- else -%}
        {%- set default = t.databases | selectattr('id', 'equalto', '') | list -%}
        {{- '(' ~ column ~ ' <=> ' ~ (("case when " ~ name_column ~ " = '" ~ default[0].name ~ "' then null else " ~ name_column ~ " end") if default else name_column) ~ ')' -}}
    {%- endif -%}
{%- endmacro %}

{#- Rows whose `lsn_column` lies in each database's LSN range of `parts` (a window's DbWindows as
    the plan gives them: {database, name, lower_lsn, upper_lsn}): `low_op` the lower bound's
    comparison ('>' for a mart's watermark, '>=' for what arrived), upper inclusive. A tenant
    table's rows match their part by `name_column`; a table of one database has one part. -#}
{% macro _lsn_parts(parts, lsn_column, name_column=none, low_op='>') -%}
    {%- set s = sqlserver_cdc._sql_string -%}
    {%- set ors = [] -%}
    {%- for p in parts -%}
        {%- set ands = [] -%}
        {%- if name_column is not none -%}{%- do ands.append(name_column ~ ' = ' ~ s(p.name)) -%}{%- endif -%}
        {%- if p.lower_lsn -%}{%- do ands.append(lsn_column ~ ' ' ~ low_op ~ ' ' ~ s(p.lower_lsn)) -%}{%- endif -%}
        {%- if p.upper_lsn is not none -%}{%- do ands.append(lsn_column ~ ' <= ' ~ s(p.upper_lsn)) -%}{%- endif -%}
        {%- do ors.append('(' ~ (ands | join(' and ') or 'true') ~ ')') -%}
    {%- endfor -%}
    {{- '(' ~ (ors | join(' or ') or 'false') ~ ')' -}}
{%- endmacro %}
