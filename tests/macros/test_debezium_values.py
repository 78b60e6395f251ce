"""Debezium value macros: Kafka Connect's encodings (reference debezium.md, "Column value
encodings") decode to the text a change-table export holds, checked against vectors and, for
decimals and timestamps, against the writer's Python encoder over random values."""

from __future__ import annotations

import random
from datetime import date, datetime, timedelta
from decimal import Decimal

from cdc_simulator import debezium_writer


def _decode(render, cases: list[tuple[str | None, str, int, int]]) -> list[str | None]:
    """debezium_value_text over (value, encoding, scale, digits) rows, in order."""
    values = ", ".join(
        f"({i}, {'null' if v is None else repr(v)}, '{enc}', {scale}, {digits})"
        for i, (v, enc, scale, digits) in enumerate(cases))
    rows = render(
        "select i, {{ sqlserver_cdc.debezium_value_text('v', 'enc', 'scale', 'digits') }} as text"
        f" from values {values} as t(i, v, enc, scale, digits) order by i")
    return [r["text"] for r in rows]


DECIMAL = "org.apache.kafka.connect.data.Decimal"


def test_logical_types_decode_to_change_table_text(render):
    cases = [
        # Decimal: base64 of the unscaled big-endian two's-complement integer, scale from the schema
        ("BNI=", DECIMAL, 2, 0),  # 0x04D2 = 1234
        ("+y4=", DECIMAL, 2, 0),  # 0xFB2E = -1234
        ("AA==", DECIMAL, 4, 0),
        ("/w==", DECIMAL, 0, 0),  # -1
        ("not base64!", DECIMAL, 2, 0),
        ("AQIDBAUGBwgJCgsMDQ4PEBE=", DECIMAL, 0, 0),  # 17 bytes: beyond decimal(38)
        # dates and instants
        ("19655", "io.debezium.time.Date", 0, 0),
        ("-719162", "org.apache.kafka.connect.data.Date", 0, 0),
        ("2023-10-23", "io.debezium.time.Date", 0, 0),
        ("1698085925673", "io.debezium.time.Timestamp", 0, 0),
        ("1698085925673", "org.apache.kafka.connect.data.Timestamp", 0, 0),
        ("1698085925673123", "io.debezium.time.MicroTimestamp", 0, 0),
        ("1698085925673123456", "io.debezium.time.NanoTimestamp", 0, 0),
        ("-1500", "io.debezium.time.NanoTimestamp", 0, 0),  # 7th digit cut, as datetime2(7) text is
        ("2019-04-19T11:22:33.1234567+02:00", "io.debezium.time.ZonedTimestamp", 0, 0),
        # times of day, rendered with the declared fractional digits
        ("45296789", "io.debezium.time.Time", 0, 3),
        ("45296789123", "io.debezium.time.MicroTime", 0, 6),
        ("45296789123456", "io.debezium.time.NanoTime", 0, 7),
        ("45296789", "org.apache.kafka.connect.data.Time", 0, 0),
        ("86400000", "io.debezium.time.Time", 0, 3),  # not a time of day
        # bytes
        ("AQL/", "bytes", 0, 0),
        ("AQL/", "base64", 0, 0),
        ("AQL_", "base64-url-safe", 0, 0),
        ("0102ff", "hex", 0, 0),
        ("zz", "hex", 0, 0),
        ("@@", "bytes", 0, 0),
        # plain values pass
        ("30.36314", "plain", 0, 0),
        (None, "io.debezium.time.Date", 0, 0),
    ]
    assert _decode(render, cases) == [
        "1234E-2", "-1234E-2", "0E-4", "-1E-0", None, None,
        "2023-10-25", "0001-01-01", None,
        "2023-10-23 18:32:05.673", "2023-10-23 18:32:05.673", "2023-10-23 18:32:05.673123",
        "2023-10-23 18:32:05.673123", "1969-12-31 23:59:59.999998", "2019-04-19T11:22:33.1234567+02:00",
        "12:34:56.789", "12:34:56.789123", "12:34:56.7891234", "12:34:56", None,
        "0x0102FF", "0x0102FF", "0x0102FF", "0x0102FF", None, None,
        "30.36314", None,
    ]


def test_decimals_and_instants_round_trip_the_python_encoder(render):
    rng = random.Random(5)
    cases, expected = [], []
    for _ in range(150):
        scale = rng.randint(0, 6)
        unscaled = rng.choice([rng.randint(-10**6, 10**6), rng.randint(-10**37, 10**37), rng.randint(-300, 300)])
        value = Decimal(unscaled).scaleb(-scale)
        cases.append((debezium_writer.encode(value, f"decimal(38,{scale})"), DECIMAL, scale, 0))
        expected.append(value)
    moments = [datetime(1970, 1, 1) + timedelta(microseconds=rng.randint(-2 * 10**15, 9 * 10**15)) for _ in range(50)]
    for moment, sql_type in zip(moments, ["datetime", "datetime2(5)", "datetime2(7)"] * 20):
        encoding = debezium_writer.column_schema(sql_type)["name"]
        cases.append((str(debezium_writer.encode(moment, sql_type)), encoding, 0, 0))
        expected.append(moment.replace(microsecond=moment.microsecond // 1000 * 1000) if sql_type == "datetime"
                        else moment)
    days = [date(1, 1, 1) + timedelta(days=rng.randint(0, 3652058)) for _ in range(30)]
    for day in days:
        cases.append((str(debezium_writer.encode(day, "date")), "io.debezium.time.Date", 0, 0))
        expected.append(day)
    got = _decode(render, cases)
    for text, want, case in zip(got, expected, cases):
        if isinstance(want, Decimal):
            assert Decimal(text) == want, case
        elif isinstance(want, datetime):
            assert datetime.fromisoformat(text) == want, case
        else:
            assert date.fromisoformat(text) == want, case


def test_declared_types_give_the_connectors_encodings(render):
    pairs = [
        ("decimal(10,2)", {}), ("money", {"decimal_handling_mode": "double"}), ("date", {}),
        ("datetime", {}), ("datetime2(3)", {}), ("datetime2(6)", {}), ("datetime2", {}),
        ("datetime2(7)", {"time_precision_mode": "connect"}), ("datetimeoffset", {}), ("time(2)", {}),
        ("time", {}), ("time(7)", {"time_precision_mode": "adaptive_time_microseconds"}), ("varbinary(16)", {}),
        ("binary(4)", {"binary_handling_mode": "hex"}), ("nvarchar(50)", {}), ("bit", {}),
    ]
    sql = " union all ".join(
        f"select {i} as i, '{{{{ sqlserver_cdc.debezium_encoding('{t}', {o}) }}}}' as encoding, "
        f"{{{{ sqlserver_cdc.declared_scale('{t}') }}}} as scale, {{{{ sqlserver_cdc.fraction_digits('{t}') }}}} as digits"
        for i, (t, o) in enumerate(pairs))
    rows = render(f"select * from ({sql}) order by i")
    assert [(r["encoding"], r["scale"], r["digits"]) for r in rows] == [
        (DECIMAL, 2, 7), ("plain", 4, 7), ("io.debezium.time.Date", 0, 7),
        ("io.debezium.time.Timestamp", 0, 3), ("io.debezium.time.Timestamp", 0, 3),
        ("io.debezium.time.MicroTimestamp", 0, 6), ("io.debezium.time.NanoTimestamp", 0, 7),
        ("org.apache.kafka.connect.data.Timestamp", 0, 7), ("io.debezium.time.ZonedTimestamp", 0, 7),
        ("io.debezium.time.Time", 0, 2), ("io.debezium.time.NanoTime", 0, 7), ("io.debezium.time.MicroTime", 0, 7),
        ("bytes", 0, 7), ("hex", 0, 7), ("plain", 0, 7), ("plain", 0, 7),
    ]


def test_invalid_value_reasons_carry_each_encodings_description_verbatim(render):
    """Every description reaches the reason as written (quotes included: a SQL literal must not
    swallow the apostrophe of two's-complement)."""
    rows = render(
        "{% set encodings = sqlserver_cdc._debezium_encodings() %}"
        "select enc, {{ sqlserver_cdc.debezium_value_invalid_reason(\"'price'\", \"'12.5'\", 'enc') }} as reason"
        " from values {% for name in encodings %}('{{ name }}'){{ ',' if not loop.last }}{% endfor %} as t(enc)")
    descriptions = {r["enc"]: r["reason"] for r in rows}
    assert descriptions[DECIMAL] == ('column price: value "12.5" is not a valid ' + DECIMAL
                                     + " (base64 of the unscaled big-endian two's-complement integer)")
    assert descriptions["hex"] == 'column price: value "12.5" is not a valid hex (hex bytes)'
    assert len(descriptions) == 15
