{#- The declaration of a tracked table (var cdc_tracked_tables), validated, with defaults filled:
    name, channel (change_tables | ces | debezium), capture_instance (change tables: the latest of
    its capture instances), instances (change tables: [{name, columns}] in the order they were
    created, from capture_instances, else the one capture_instance; each instance's columns with
    its own ordinals, their positions in its captured-column list), databases (the databases it
    reads, _table_databases: [{id, name, sql_name, server, guid}]) and tenant (its marts keyed by
    source_database too), source_database (its one database's name on SQL Server, none when it
    reads several or nobody named it), source_schema, source_table (how CES and Debezium events
    are routed), topic
    (Debezium: route by the Kafka topic instead), debezium (the connector's encoding options,
    with defaults: flattened, decimal_handling_mode, time_precision_mode, binary_handling_mode),
    key (list), columns (name, type, ordinal),
    soft_deletes, history_delete_versions, history_columns (the columns whose changes open a new
    history version; none means every column), demo (the demo's tables: `python -m runner init` removes them). Fails
    with a message naming the table and the bad field, also for a field it does not know. -#}
{% macro tracked_table(table_name) -%}
    {%- set tables = var('cdc_tracked_tables', {}) -%}
    {%- if table_name not in tables -%}
        {{ exceptions.raise_compiler_error("tracked table '" ~ table_name ~ "' is not declared in var cdc_tracked_tables (declared: " ~ (tables.keys() | list | join(', ')) ~ ")") }}
    {%- endif -%}
    {%- set raw = tables[table_name] -%}
    {%- set channels = {'change_tables': [] if raw.get('capture_instances') else ['capture_instance'], 'ces': ['source_schema', 'source_table'],
        'debezium': [] if raw.get('topic') else ['source_schema', 'source_table']} -%}
    {%- if raw.get('channel') not in channels -%}
        {{ exceptions.raise_compiler_error("tracked table '" ~ table_name ~ "': channel must be one of " ~ (channels.keys() | list | join(', ')) ~ "; got '" ~ raw.get('channel') ~ "'") }}
    {%- endif -%}
    {%- for field in ['key', 'columns'] + channels[raw.channel] if field not in raw -%}
        {{ exceptions.raise_compiler_error("tracked table '" ~ table_name ~ "': missing '" ~ field ~ "' (channel " ~ raw.channel ~ ")") }}
    {%- endfor -%}
    {{ sqlserver_cdc._check_declared_names(table_name, raw) }}
    {%- set names = raw.columns | map(attribute='name') | map('lower') | list -%}
    {%- set several = raw.get('capture_instances') is not none -%}
    {%- set columns = [] -%}
    {%- for column in raw.columns -%}
        {%- if column.name is not defined or column.type is not defined or (column.ordinal is not defined and not several) -%}
            {{ exceptions.raise_compiler_error("tracked table '" ~ table_name ~ "': every column needs name, type and ordinal; got " ~ column) }}
        {%- endif -%}
        {#- with several capture instances an ordinal is the column's bit in the marts' masks: by default its position -#}
        {#- source: the column's name in the exports, CES and Debezium events (source_name), else its own -#}
        {%- do columns.append({'name': column.name, 'type': column.type, 'ordinal': column.get('ordinal', loop.index),
            'source': column.get('source_name') or column.name}) -%}
        {%- if adapter.dispatch('spark_type', 'sqlserver_cdc')(column.type | string) is none -%}
            {{ exceptions.raise_compiler_error("tracked table '" ~ table_name ~ "': column '" ~ column.name ~ "' has type '"
                ~ column.type ~ "', which is not a supported SQL Server type (supported: " ~ sqlserver_cdc._supported_types() ~ ")") }}
        {%- endif -%}
    {%- endfor -%}
    {%- for key in raw.key if key | lower not in names -%}
        {{ exceptions.raise_compiler_error("tracked table '" ~ table_name ~ "': key column '" ~ key ~ "' is not among its columns") }}
    {%- endfor -%}
    {%- set history_columns = raw.get('history_columns') -%}
    {%- if history_columns is not none -%}
        {%- if history_columns is string or history_columns | length == 0 -%}
            {{ exceptions.raise_compiler_error("tracked table '" ~ table_name ~ "': history_columns must be a non-empty list of column names; got " ~ history_columns) }}
        {%- endif -%}
        {%- for column in history_columns if column | lower not in names -%}
            {{ exceptions.raise_compiler_error("tracked table '" ~ table_name ~ "': history_columns names '" ~ column ~ "', which is not among its columns (" ~ (names | join(', ')) ~ ")") }}
        {%- endfor -%}
    {%- endif -%}
    {%- if 'buckets' in raw -%}
        {{ exceptions.raise_compiler_error("tracked table '" ~ table_name ~ "': 'buckets' is no longer used (the marts are Delta tables applied by MERGE, not parquet partitions); remove it") }}
    {%- endif -%}
    {#- a misspelt option (soft_delete) would otherwise be ignored in silence -#}
    {%- set known = ['channel', 'capture_instance', 'capture_instances', 'database', 'databases', 'source_database',
        'source_schema', 'source_table', 'topic', 'debezium', 'key', 'columns', 'soft_deletes', 'history_delete_versions',
        'history_columns', 'demo'] -%}
    {%- for field in raw if field not in known -%}
        {{ exceptions.raise_compiler_error("tracked table '" ~ table_name ~ "': unknown field '" ~ field ~ "' (known: " ~ (known | join(', ')) ~ ")") }}
    {%- endfor -%}
    {%- if columns | map(attribute='ordinal') | unique | list | length != columns | length -%}
        {{ exceptions.raise_compiler_error("tracked table '" ~ table_name ~ "': two columns have the same ordinal") }}
    {%- endif -%}
    {%- set instances = sqlserver_cdc._capture_instances(table_name, raw, columns) -%}
    {%- set debezium = sqlserver_cdc._debezium_options(table_name, raw) -%}
    {%- set found = sqlserver_cdc._table_databases(table_name, raw) -%}
    {{ return({
        'name': table_name,
        'channel': raw.channel,
        'capture_instance': instances[-1].name if instances else none,
        'instances': instances,
        'databases': found.databases,
        'tenant': found.tenant,
        'source_database': found.databases[0].sql_name if found.databases | length == 1 else none,
        'source_schema': raw.get('source_schema'),
        'source_table': raw.get('source_table'),
        'topic': raw.get('topic'),
        'debezium': debezium,
        'key': raw.key,
        'columns': columns,
        'soft_deletes': raw.get('soft_deletes', false),
        'history_delete_versions': raw.get('history_delete_versions', false),
        'history_columns': history_columns,
    }) }}
{%- endmacro %}

{#- The capture instances of a change-table table (docs/tables.md "Capture-instance changes"), validated:
    [{name, columns, dropped}], each instance's columns (name, type, ordinal) with the ordinals of
    its captured-column list; capture_instances lists each instance's captured columns in order
    (and dropped: true once it is dropped and its last export landed), a lone capture_instance
    captures the table's columns with their declared ordinals. -#}
{% macro _capture_instances(table_name, raw, columns) -%}
    {%- set declared = raw.get('capture_instances') -%}
    {%- if raw.channel != 'change_tables' -%}
        {%- if declared or raw.get('capture_instance') -%}
            {{ exceptions.raise_compiler_error("tracked table '" ~ table_name ~ "': capture instances are for channel change_tables only") }}
        {%- endif -%}
        {{ return([]) }}
    {%- endif -%}
    {%- if declared is none -%}
        {{ return([{'name': raw.capture_instance, 'columns': columns, 'dropped': false}]) }}
    {%- endif -%}
    {%- if raw.get('capture_instance') -%}
        {{ exceptions.raise_compiler_error("tracked table '" ~ table_name ~ "': declare either capture_instance or capture_instances, not both") }}
    {%- endif -%}
    {%- if declared is string or declared is mapping or declared | length == 0 -%}
        {{ exceptions.raise_compiler_error("tracked table '" ~ table_name ~ "': capture_instances must be a list of {name, columns}, oldest first; got " ~ declared) }}
    {%- endif -%}
    {%- set by_name = {} -%}
    {%- for c in columns -%}{%- do by_name.update({c.name | lower: c}) -%}{%- endfor -%}
    {%- set instances = [] -%}
    {%- for instance in declared -%}
        {%- if instance is not mapping or not instance.get('name') or instance.get('columns') is string or not instance.get('columns') -%}
            {{ exceptions.raise_compiler_error("tracked table '" ~ table_name ~ "': each of capture_instances needs a name and its captured columns in order (columns: [...]); got " ~ instance) }}
        {%- endif -%}
        {%- if instance.name | lower in instances | map(attribute='name') | map('lower') | list -%}
            {{ exceptions.raise_compiler_error("tracked table '" ~ table_name ~ "': capture instance '" ~ instance.name ~ "' is listed twice") }}
        {%- endif -%}
        {%- set captured = [] -%}
        {%- for name in instance.columns -%}
            {%- if name | lower not in by_name -%}
                {{ exceptions.raise_compiler_error("tracked table '" ~ table_name ~ "': capture instance '" ~ instance.name ~ "' captures '" ~ name ~ "', which is not among the table's columns (" ~ (by_name.keys() | list | join(', ')) ~ ")") }}
            {%- endif -%}
            {%- set c = by_name[name | lower] -%}
            {%- do captured.append({'name': c.name, 'type': c.type, 'ordinal': loop.index, 'source': c.source}) -%}
        {%- endfor -%}
        {%- for key in raw.key if key | lower not in instance.columns | map('lower') | list -%}
            {{ exceptions.raise_compiler_error("tracked table '" ~ table_name ~ "': capture instance '" ~ instance.name ~ "' does not capture key column '" ~ key ~ "'") }}
        {%- endfor -%}
        {%- if instance.get('dropped', false) not in (true, false) -%}
            {{ exceptions.raise_compiler_error("tracked table '" ~ table_name ~ "': capture instance '" ~ instance.name ~ "': dropped must be true or false; got " ~ instance.dropped) }}
        {%- endif -%}
        {%- do instances.append({'name': instance.name, 'columns': captured, 'dropped': instance.get('dropped', false)}) -%}
    {%- endfor -%}
    {{ return(instances) }}
{%- endmacro %}

{#- The Debezium connector options that decide how a table's values are encoded when its events
    carry no schema (and, for flattened, how its events look), validated, defaults filled. -#}
{% macro _debezium_options(table_name, raw) -%}
    {%- set given = raw.get('debezium') or {} -%}
    {%- if raw.get('channel') != 'debezium' and given -%}
        {{ exceptions.raise_compiler_error("tracked table '" ~ table_name ~ "': 'debezium' options are for channel debezium only") }}
    {%- endif -%}
    {%- set allowed = {
        'flattened': [true, false],
        'decimal_handling_mode': ['precise', 'double', 'string'],
        'time_precision_mode': ['adaptive', 'adaptive_time_microseconds', 'connect'],
        'binary_handling_mode': ['bytes', 'base64', 'base64-url-safe', 'hex'],
    } -%}
    {%- set options = {'flattened': false, 'decimal_handling_mode': 'precise', 'time_precision_mode': 'adaptive',
        'binary_handling_mode': 'bytes'} -%}
    {%- for name, value in given.items() -%}
        {%- if name not in allowed -%}
            {{ exceptions.raise_compiler_error("tracked table '" ~ table_name ~ "': unknown debezium option '" ~ name ~ "' (known: " ~ (allowed.keys() | list | join(', ')) ~ ")") }}
        {%- elif value not in allowed[name] -%}
            {{ exceptions.raise_compiler_error("tracked table '" ~ table_name ~ "': debezium option " ~ name ~ " must be one of " ~ (allowed[name] | join(', ')) ~ "; got '" ~ value ~ "'") }}
        {%- endif -%}
        {%- do options.update({name: value}) -%}
    {%- endfor -%}
    {{ return(options) }}
{%- endmacro %}

{#- Declared names reach generated SQL as they are (docs/tables.md "Names"): the table's and its
    columns' names as identifiers, capture instances, source names, columns' source_name and
    topics inside string literals. Refuses, naming the table and the name, what would not parse
    or would mean something else: an identifier that is not letters, digits and underscores
    starting with a letter (a SQL Server name like [Order Date] or o'name is the column's
    source_name, its name a plain one), a source_name that is not a non-empty text or is two
    columns' but for case,
    one starting with an underscore or equal to a column the package adds (commit_lsn,
    operation, valid_from ...), a Spark literal or niladic function (true, current_date ...), two
    columns equal but for case (Spark's names are case-insensitive); a quote, backslash or control
    character in a literal name. -#}
{% macro _check_declared_names(table_name, raw) -%}
    {%- set re = modules.re -%}
    {%- set added = ['capture_instance', 'change_lsn', 'changed_columns', 'command_id', 'commit_lsn', 'commit_time',
        'is_current', 'is_deleted', 'landed_record', 'operation', 'operation_code', 'quarantine_reason',
        'update_mask', 'valid_from', 'valid_from_lsn', 'valid_to', 'valid_to_lsn'] -%}
    {%- set spark = ['true', 'false', 'null', 'current_date', 'current_time', 'current_timestamp', 'current_user',
        'session_user', 'user'] -%}
    {%- set remedy = "; name it with letters, digits and underscores and give the SQL Server name as its source_name (e.g. {name: order_date, source_name: 'Order Date', ...})" -%}
    {%- if not re.fullmatch('[A-Za-z][A-Za-z0-9_]*', table_name | string) -%}
        {{ exceptions.raise_compiler_error("tracked table '" ~ table_name ~ "': a table's name names its models, so it must be letters, digits and underscores starting with a letter") }}
    {%- endif -%}
    {%- set seen = [] -%}
    {%- for column in raw.get('columns') or [] if column is mapping and column.name is defined -%}
        {%- set name = column.name | string -%}
        {%- if not re.fullmatch('[A-Za-z_][A-Za-z0-9_]*', name) -%}
            {{ exceptions.raise_compiler_error("tracked table '" ~ table_name ~ "': column name '" ~ name ~ "' is not a plain identifier" ~ remedy) }}
        {%- elif name.startswith('_') or name | lower in added -%}
            {{ exceptions.raise_compiler_error("tracked table '" ~ table_name ~ "': column name '" ~ name ~ "' is one the package adds to staging and the marts (" ~ added | join(', ') ~ ", and names starting with _)" ~ remedy) }}
        {%- elif name | lower in spark -%}
            {{ exceptions.raise_compiler_error("tracked table '" ~ table_name ~ "': column name '" ~ name ~ "' is a Spark SQL literal or function, not read as a column" ~ remedy) }}
        {%- elif name | lower in seen -%}
            {{ exceptions.raise_compiler_error("tracked table '" ~ table_name ~ "': two columns are named '" ~ name ~ "' but for case; Spark's names are case-insensitive" ~ remedy) }}
        {%- endif -%}
        {%- do seen.append(name | lower) -%}
    {%- endfor -%}
    {%- set sources = [] -%}
    {%- for column in raw.get('columns') or [] if column is mapping and column.name is defined -%}
        {%- set source = column.get('source_name', column.name) -%}
        {%- if source is not string or not source or source != source | trim -%}
            {{ exceptions.raise_compiler_error("tracked table '" ~ table_name ~ "': column '" ~ column.name ~ "': source_name must be the column's name in the exports and events, a non-empty text without leading or trailing spaces; got " ~ source) }}
        {%- elif source | lower in sources -%}
            {{ exceptions.raise_compiler_error("tracked table '" ~ table_name ~ "': two columns have the source name '" ~ source ~ "' but for case; the exports' and events' column names are matched without case") }}
        {%- endif -%}
        {%- do sources.append(source | lower) -%}
    {%- endfor -%}
    {%- set literals = [('capture_instance', raw.get('capture_instance')), ('source_database', raw.get('source_database')),
        ('source_schema', raw.get('source_schema')), ('source_table', raw.get('source_table')), ('topic', raw.get('topic'))] -%}
    {%- set instances = raw.get('capture_instances') -%}
    {%- if instances is iterable and instances is not string and instances is not mapping -%}
        {%- for instance in instances if instance is mapping -%}
            {%- do literals.append(('capture_instances', instance.get('name'))) -%}
        {%- endfor -%}
    {%- endif -%}
    {%- for field, value in literals if value is not none and re.search("['\\\\\x00-\x1f]", value | string) -%}
        {{ exceptions.raise_compiler_error("tracked table '" ~ table_name ~ "': " ~ field ~ " '" ~ value ~ "' holds a quote, backslash or control character, which the landing folders and generated SQL cannot carry; rename it (a capture instance: sys.sp_cdc_enable_table's @capture_instance)") }}
    {%- endfor -%}
{%- endmacro %}

{#- The databases of the project (var cdc_databases, docs/tables.md "Several databases"), checked:
    {name: {id, name, sql_name, server, guid, time_zone}}; id is '' for the one marked default
    (its exports at the landing folder's top level, NULL in the raw table's source_database),
    else its name; sql_name its name on SQL Server (default: its name). Empty when the project
    declares none (its one database is the default one). Mirrors runner/project/config.py
    declared_databases, which checks the same before Spark starts. -#}
{% macro _databases() -%}
    {%- set declared = var('cdc_databases', {}) or {} -%}
    {%- if declared is not mapping -%}
        {{ exceptions.raise_compiler_error("var cdc_databases must map each database's name to its settings, e.g. {erp: {}, crm: {database: CRM_Prod}}") }}
    {%- endif -%}
    {%- set found, defaults = {}, [] -%}
    {%- for name, settings in declared.items() -%}
        {%- set settings = settings or {} -%}
        {%- if not modules.re.fullmatch('[A-Za-z0-9][A-Za-z0-9_.-]*', name | string) -%}
            {{ exceptions.raise_compiler_error("var cdc_databases: database name '" ~ name ~ "' must be letters, digits, '_', '-' or '.', starting with a letter or digit") }}
        {%- endif -%}
        {%- for field in settings if field not in ['default', 'database', 'server', 'database_guid', 'time_zone'] -%}
            {{ exceptions.raise_compiler_error("var cdc_databases: database '" ~ name ~ "': unknown field '" ~ field ~ "' (known: default, database, server, database_guid, time_zone)") }}
        {%- endfor -%}
        {%- for field in ['database', 'server', 'database_guid'] if modules.re.search("['\\\x00-\x1f]", (settings.get(field) or '') | string) -%}
            {{ exceptions.raise_compiler_error("var cdc_databases: database '" ~ name ~ "': " ~ field ~ " holds a quote, backslash or control character") }}
        {%- endfor -%}
        {%- if settings.get('default') -%}{%- do defaults.append(name) -%}{%- endif -%}
        {%- do found.update({name | string: {'id': '' if settings.get('default') else name | string, 'name': name | string,
            'sql_name': (settings.get('database') or name) | string, 'server': settings.get('server'),
            'guid': settings.get('database_guid'), 'time_zone': settings.get('time_zone')}}) -%}
    {%- endfor -%}
    {%- if defaults | length > 1 -%}
        {{ exceptions.raise_compiler_error("var cdc_databases: " ~ defaults | join(', ') ~ " are each marked default: true; one database at most is the default one") }}
    {%- endif -%}
    {{ return(found) }}
{%- endmacro %}

{#- The databases a tracked table reads and whether it is a tenant table (runner/project/config.py
    table_databases decides the same): `databases` (names or patterns with * and ?) fans several
    into one pair of marts keyed by source_database; `database` names its one; neither reads the
    project's one database (the declared one, or the default one when none is declared), which
    is the only choice while at most one is declared. {databases: [{id, name, sql_name, server,
    guid}], tenant}. A CES or Debezium table's own source_database, when given, names its
    database on SQL Server (the one database of a table without a declared one). -#}
{% macro _table_databases(table_name, raw) -%}
    {%- set estate = sqlserver_cdc._databases() -%}
    {%- set where = "tracked table '" ~ table_name ~ "': " -%}
    {%- if raw.get('database') is not none and raw.get('databases') is not none -%}
        {{ exceptions.raise_compiler_error(where ~ "give database (its one database) or databases (a tenant table over several), one") }}
    {%- endif -%}
    {%- if raw.get('databases') is not none -%}
        {%- if raw.get('source_database') -%}
            {{ exceptions.raise_compiler_error(where ~ "a tenant table (databases) takes each database's name on SQL Server from var cdc_databases; leave source_database out") }}
        {%- endif -%}
        {%- if raw.databases is string or raw.databases is mapping or raw.databases | length == 0 -%}
            {{ exceptions.raise_compiler_error(where ~ "databases must be a non-empty list of database names or patterns (tenant_*); got " ~ raw.databases) }}
        {%- endif -%}
        {%- set found = [] -%}
        {%- for pattern in raw.databases -%}
            {%- set regex = modules.re.escape(pattern | string) | replace('\\*', '.*') | replace('\\?', '.') -%}
            {%- set matched = [] -%}
            {%- for name in estate | sort if modules.re.fullmatch(regex, name) -%}{%- do matched.append(name) -%}{%- endfor -%}
            {%- if not matched -%}
                {{ exceptions.raise_compiler_error(where ~ "databases: '" ~ pattern ~ "' matches no database of var cdc_databases (" ~ (estate.keys() | sort | join(', ') or 'none declared') ~ "); declare it there") }}
            {%- endif -%}
            {%- for name in matched if estate[name] not in found -%}{%- do found.append(estate[name]) -%}{%- endfor -%}
        {%- endfor -%}
        {{ return({'databases': found | sort(attribute='name'), 'tenant': true}) }}
    {%- endif -%}
    {%- if raw.get('database') is not none -%}
        {%- if raw.database not in estate -%}
            {{ exceptions.raise_compiler_error(where ~ "database '" ~ raw.database ~ "' is not declared in var cdc_databases (declared: " ~ (estate.keys() | sort | join(', ') or 'none') ~ "); declare it there") }}
        {%- endif -%}
        {%- set db = estate[raw.database] -%}
        {%- if raw.get('source_database') and raw.source_database | lower != db.sql_name | lower -%}
            {{ exceptions.raise_compiler_error(where ~ "source_database '" ~ raw.source_database ~ "' is not the name on SQL Server of its database '" ~ raw.database ~ "' (" ~ db.sql_name ~ "): leave source_database out, or set database: under var cdc_databases." ~ raw.database) }}
        {%- endif -%}
        {{ return({'databases': [db], 'tenant': false}) }}
    {%- endif -%}
    {%- if estate | length > 1 -%}
        {{ exceptions.raise_compiler_error(where ~ "the project declares " ~ estate | length ~ " databases (" ~ estate.keys() | sort | join(', ') ~ "); say which this table comes from: database: <name>, or databases: [<name or pattern>, ...] for one pair of marts over several") }}
    {%- endif -%}
    {%- if estate -%}
        {%- set db = estate.values() | first -%}
        {{ return({'databases': [db], 'tenant': false}) }}
    {%- endif -%}
    {{ return({'databases': [{'id': '', 'name': '', 'sql_name': raw.get('source_database'), 'server': none, 'guid': none,
        'time_zone': none}], 'tenant': false}) }}
{%- endmacro %}
