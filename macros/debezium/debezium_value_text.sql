{#- A column value as the Debezium JSON converter sends it, turned into the text a change-table
    export holds for it (what cast_from_text reads): Decimal base64 unscaled bytes with their
    scale to decimal text ('-1234E-2'), Date days, Timestamp / MicroTimestamp / NanoTimestamp
    since the epoch and Time / MicroTime / NanoTime since midnight to date, timestamp and time
    text, base64 or hex bytes to '0x..' hex; ZonedTimestamp strings and plain values as they are.
    All arguments are SQL expressions, so one expression decodes every column of a row:
    value (text); encoding (a logical type name such as 'io.debezium.time.Date', or 'bytes',
    'base64', 'base64-url-safe', 'hex', 'plain'); scale (int: a Decimal's scale); digits (int:
    the fractional-second digits of a time's text).
    NULL when the value does not decode: debezium_value_invalid_reason names the encoding. -#}
{% macro debezium_value_text(value, encoding, scale='0', digits='7', sqlserver_type=none) -%}
    {{ return(adapter.dispatch('debezium_value_text', 'sqlserver_cdc')(value, encoding, scale, digits, sqlserver_type)) }}
{%- endmacro %}

{% macro spark__debezium_value_text(value, encoding, scale, digits, sqlserver_type) -%}
    {%- set integer = 'try_cast(' ~ value ~ ' as bigint)' -%}
    {%- set branches = sqlserver_cdc._debezium_value_branches(value, scale, digits) -%}
    {%- set plausible = sqlserver_cdc._plausible_encodings(sqlserver_type) -%}
    {%- if plausible == [] -%}
    {{ value }}
    {%- else -%}
    (case {{ encoding }}
        {%- for name, expr in branches if plausible is none or name in plausible %}
        when '{{ name }}' then {{ expr }}
        {%- endfor %}
        else {{ value }}
    end)
    {%- endif -%}
{%- endmacro %}

{% macro default__debezium_value_text(value, encoding, scale, digits, sqlserver_type) -%}
    {{ exceptions.raise_compiler_error(sqlserver_cdc._not_supported('debezium_value_text')) }}
{%- endmacro %}

{#- The encodings a value of a declared type can arrive in (none: any), so a column's decoding
    carries only the branches it can need. -#}
{% macro _plausible_encodings(sqlserver_type) -%}
    {%- if sqlserver_type is none -%}{{ return(none) }}{%- endif -%}
    {%- set base = (sqlserver_type | lower).split('(')[0] | trim -%}
    {%- set spark = sqlserver_cdc.spark_type(sqlserver_type) -%}
    {%- if base in ('decimal', 'numeric', 'money', 'smallmoney') -%}
        {{ return(['org.apache.kafka.connect.data.Decimal']) }}
    {%- elif base == 'date' -%}
        {{ return(['io.debezium.time.Date', 'org.apache.kafka.connect.data.Date']) }}
    {%- elif base == 'time' -%}
        {{ return(['io.debezium.time.Time', 'org.apache.kafka.connect.data.Time', 'io.debezium.time.MicroTime',
            'io.debezium.time.NanoTime']) }}
    {%- elif spark == 'timestamp' -%}
        {{ return(['io.debezium.time.Timestamp', 'org.apache.kafka.connect.data.Timestamp',
            'io.debezium.time.MicroTimestamp', 'io.debezium.time.NanoTimestamp']) }}
    {%- elif spark == 'binary' -%}
        {{ return(['bytes', 'base64', 'base64-url-safe', 'hex']) }}
    {%- else -%}
        {{ return([]) }}
    {%- endif -%}
{%- endmacro %}

{#- (encoding, decoding expression) pairs for debezium_value_text. -#}
{% macro _debezium_value_branches(value, scale, digits) -%}
    {%- set integer = 'try_cast(' ~ value ~ ' as bigint)' -%}
    {%- set branches = [
        ('org.apache.kafka.connect.data.Decimal', sqlserver_cdc._decimal_text_from_base64(value, scale)),
        ('io.debezium.time.Date', sqlserver_cdc._date_text(integer)),
        ('org.apache.kafka.connect.data.Date', sqlserver_cdc._date_text(integer)),
    ] -%}
    {%- for name, micros in [('io.debezium.time.Timestamp', integer ~ ' * 1000'),
        ('org.apache.kafka.connect.data.Timestamp', integer ~ ' * 1000'),
        ('io.debezium.time.MicroTimestamp', integer),
        ('io.debezium.time.NanoTimestamp', sqlserver_cdc._floor_div(integer, 1000))] -%}
        {%- do branches.append((name, 'cast(timestamp_micros(' ~ micros ~ ') as string)')) -%}
    {%- endfor -%}
    {%- for name, per_second in [('io.debezium.time.Time', 1000), ('org.apache.kafka.connect.data.Time', 1000),
        ('io.debezium.time.MicroTime', 1000000), ('io.debezium.time.NanoTime', 1000000000)] -%}
        {%- do branches.append((name, sqlserver_cdc._time_text(integer, per_second, digits))) -%}
    {%- endfor -%}
    {%- set base64 = "concat('0x', hex(try_to_binary(" ~ value ~ ", 'base64')))" -%}
    {%- do branches.extend([
        ('bytes', base64),
        ('base64', base64),
        ('base64-url-safe', "concat('0x', hex(try_to_binary(rpad(translate(" ~ value ~ ", '-_', '+/'), cast(ceil(length("
            ~ value ~ ") / 4) * 4 as int), '='), 'base64')))"),
        ('hex', "case when " ~ value ~ " rlike '^([0-9A-Fa-f]{2})*$' then concat('0x', upper(" ~ value ~ ")) end"),
    ]) -%}
    {{ return(branches) }}
{%- endmacro %}

{#- The quarantine reason of a value that did not decode in its encoding (expressions: the
    column's name, the value as sent, its encoding; sqlserver_type narrows the descriptions to
    the encodings the declared type can arrive in). -#}
{% macro debezium_value_invalid_reason(column_name, value, encoding, sqlserver_type=none) -%}
    {{ return(adapter.dispatch('debezium_value_invalid_reason', 'sqlserver_cdc')(column_name=column_name, value=value, encoding=encoding, sqlserver_type=sqlserver_type)) }}
{%- endmacro %}

{% macro spark__debezium_value_invalid_reason(column_name, value, encoding, sqlserver_type=none) -%}
    {%- set plausible = sqlserver_cdc._plausible_encodings(sqlserver_type) -%}
    concat('column ', {{ column_name }}, ': value "', {{ value }}, '" is not a valid ', {{ encoding }},
        case {{ encoding }}
            {%- for name, meaning in sqlserver_cdc._debezium_encodings().items() if plausible is none or name in plausible %}
            when '{{ name }}' then {{ sqlserver_cdc._sql_string(' (' ~ meaning ~ ')') }}
            {%- endfor %}
            else ''
        end)
{%- endmacro %}

{% macro default__debezium_value_invalid_reason(column_name, value, encoding, sqlserver_type=none) -%}
    {{ exceptions.raise_compiler_error(sqlserver_cdc._not_supported('debezium_value_invalid_reason')) }}
{%- endmacro %}

{#- What each encoding holds, for quarantine reasons. -#}
{% macro _debezium_encodings() -%}
    {{ return({
        'org.apache.kafka.connect.data.Decimal': "base64 of the unscaled big-endian two's-complement integer",
        'io.debezium.time.Date': 'days since 1970-01-01',
        'org.apache.kafka.connect.data.Date': 'days since 1970-01-01',
        'io.debezium.time.Timestamp': 'milliseconds since the epoch',
        'org.apache.kafka.connect.data.Timestamp': 'milliseconds since the epoch',
        'io.debezium.time.MicroTimestamp': 'microseconds since the epoch',
        'io.debezium.time.NanoTimestamp': 'nanoseconds since the epoch',
        'io.debezium.time.Time': 'milliseconds since midnight',
        'org.apache.kafka.connect.data.Time': 'milliseconds since midnight',
        'io.debezium.time.MicroTime': 'microseconds since midnight',
        'io.debezium.time.NanoTime': 'nanoseconds since midnight',
        'bytes': 'base64 bytes',
        'base64': 'base64 bytes',
        'base64-url-safe': 'URL-safe base64 bytes',
        'hex': 'hex bytes',
    }) }}
{%- endmacro %}

{#- The encoding a Debezium SQL Server connector gives a column of a declared type when the event
    carries no schema, under the table's connector options (decimal.handling.mode,
    time.precision.mode, binary.handling.mode): a string, the name debezium_value_text takes. -#}
{% macro debezium_encoding(sqlserver_type, options={}) -%}
    {%- set base = (sqlserver_type | lower).split('(')[0] | trim -%}
    {%- set digits = sqlserver_cdc.fraction_digits(sqlserver_type) -%}
    {%- set time_mode = options.get('time_precision_mode', 'adaptive') -%}
    {%- if base in ('decimal', 'numeric', 'money', 'smallmoney') -%}
        {{ return('org.apache.kafka.connect.data.Decimal' if options.get('decimal_handling_mode', 'precise') == 'precise' else 'plain') }}
    {%- elif base == 'date' -%}
        {{ return('org.apache.kafka.connect.data.Date' if time_mode == 'connect' else 'io.debezium.time.Date') }}
    {%- elif base in ('datetime', 'smalldatetime', 'datetime2') -%}
        {%- if time_mode == 'connect' -%}{{ return('org.apache.kafka.connect.data.Timestamp') }}{%- endif -%}
        {{ return('io.debezium.time.Timestamp' if base != 'datetime2' or digits <= 3
            else 'io.debezium.time.MicroTimestamp' if digits <= 6 else 'io.debezium.time.NanoTimestamp') }}
    {%- elif base == 'datetimeoffset' -%}
        {{ return('io.debezium.time.ZonedTimestamp') }}
    {%- elif base == 'time' -%}
        {%- if time_mode == 'connect' -%}{{ return('org.apache.kafka.connect.data.Time') }}{%- endif -%}
        {%- if time_mode == 'adaptive_time_microseconds' -%}{{ return('io.debezium.time.MicroTime') }}{%- endif -%}
        {{ return('io.debezium.time.Time' if digits <= 3 else 'io.debezium.time.MicroTime' if digits <= 6
            else 'io.debezium.time.NanoTime') }}
    {%- elif sqlserver_cdc.spark_type(sqlserver_type) == 'binary' -%}
        {{ return(options.get('binary_handling_mode', 'bytes')) }}
    {%- else -%}
        {{ return('plain') }}
    {%- endif -%}
{%- endmacro %}

{#- The scale of a declared decimal type (money 4, decimal(p) 0, decimal 0). -#}
{% macro declared_scale(sqlserver_type) -%}
    {%- set t = sqlserver_type | lower | replace(' ', '') -%}
    {%- if t in ('money', 'smallmoney') -%}{{ return(4) }}{%- endif -%}
    {%- set m = modules.re.match('^(decimal|numeric)\\(\\d+,(\\d+)\\)$', t) -%}
    {{ return(m.group(2) | int if m else 0) }}
{%- endmacro %}

{#- The fractional-second digits of a declared time / datetime2 / datetimeoffset type (7 when not
    given, SQL Server's default; 3 for datetime and smalldatetime). -#}
{% macro fraction_digits(sqlserver_type) -%}
    {%- set t = sqlserver_type | lower | replace(' ', '') -%}
    {%- set m = modules.re.match('^(time|datetime2|datetimeoffset)\\((\\d)\\)$', t) -%}
    {{ return(m.group(2) | int if m else 3 if t in ('datetime', 'smalldatetime') else 7) }}
{%- endmacro %}

{#- Integer division rounding toward minus infinity (instants before 1970 keep their fraction). -#}
{% macro _floor_div(expr, divisor) -%}
    ({{ expr }} div {{ divisor }} - case when {{ expr }} % {{ divisor }} < 0 then 1 else 0 end)
{%- endmacro %}

{#- Days since 1970-01-01 as date text, within SQL Server's range (0001-01-01 to 9999-12-31). -#}
{% macro _date_text(days) -%}
    case when {{ days }} between -719162 and 2932896 then cast(date_add(date'1970-01-01', cast({{ days }} as int)) as string) end
{%- endmacro %}

{#- A count of units since midnight as SQL Server time text with `digits` (an int expression)
    fractional digits. -#}
{% macro _time_text(units, per_second, digits) -%}
    (case when {{ units }} >= 0 and {{ units }} < {{ 86400 * per_second }} then concat(
        format_string('%02d:%02d:%02d', {{ units }} div {{ 3600 * per_second }},
            {{ units }} div {{ 60 * per_second }} % 60, {{ units }} div {{ per_second }} % 60),
        case when {{ digits }} > 0 then concat('.', lpad(cast(({{ units }} % {{ per_second }})
            * cast(power(10, {{ digits }}) as bigint) div {{ per_second }} as string), {{ digits }}, '0')) else '' end
    ) end)
{%- endmacro %}

{#- A Kafka Connect Decimal (base64 of the unscaled big-endian two's-complement integer) as
    decimal text 'unscaledE-scale' (which casts exactly); NULL when it is not base64 or has more
    than 16 bytes (beyond decimal(38)). A negative value's magnitude is one more than its
    inverted bytes'. -#}
{% macro _decimal_text_from_base64(value, scale) -%}
    transform(array(hex(try_to_binary({{ value }}, 'base64'))), h -> case when length(h) between 2 and 32 then concat(
        case when h >= '8' then '-' else '' end,
        cast(aggregate(
            sequence(1, length(h) div 2), cast(0 as decimal(38, 0)),
            (a, i) -> cast(try_add(try_multiply(a, 256),
                abs(cast(conv(substr(h, 2 * i - 1, 2), 16, 10) as int) - case when h >= '8' then 255 else 0 end))
                as decimal(38, 0))
        ) + case when h >= '8' then 1 else 0 end as string),
        'E-', {{ scale }}
    ) end)[0]
{%- endmacro %}
