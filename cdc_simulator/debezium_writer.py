"""Renders a simulated history as Debezium SQL Server connector events (JSON converter), the shape
of the reference captures (reference debezium.md): snapshot rows (op r) for the state at one LSN,
then c / u / d events with before and after rows, source.commit_lsn / change_lsn /
event_serial_no in the connector's lower-case colon form, a tombstone after each delete, values in
Kafka Connect's logical encodings (Decimal base64, Date days, Timestamp / MicroTimestamp /
NanoTimestamp, bytes base64). Options cover the forms seen in the wild: schemas enabled
({"schema", "payload"}), whole Kafka records (key, value, topic, partition, offset), Avro-JSON
unions, event_serial_no as a string, and ExtractNewRecordState flattened rows. Used by the demo
and the tests."""

from __future__ import annotations

import base64
import itertools
import json
from dataclasses import dataclass
from datetime import date, datetime, timedelta, timezone
from decimal import Decimal
from pathlib import Path

from cdc_simulator.simulate import ChangeRow, TableSpec, Transaction, lsn_hex

EPOCH = datetime(1970, 1, 1)


@dataclass(frozen=True)
class DebeziumOptions:
    schema: bool = False  # the JSON converter with schemas.enable: {"schema": ..., "payload": ...}
    kafka_record: bool = False  # each line a whole Kafka record: key, value, topic, partition, offset
    avro_unions: bool = False  # optional values as Avro-JSON unions ({"string": "x"}), as in the 1.7.1 capture
    serial_as_string: bool = False  # event_serial_no as "1", as the published examples print it
    flattened: bool = False  # ExtractNewRecordState: the row, __op / __deleted / __commit_lsn ... added
    tombstones: bool = True  # a null value after each delete (tombstones.on.delete)
    server: str = "server1"  # topic.prefix
    database: str = "ShopDb"


def _lsn(value: int) -> str:
    h = lsn_hex(value).lower()
    return f"{h[:8]}:{h[8:16]}:{h[16:]}"


def _scale(sql_type: str) -> int:
    t = sql_type.lower().replace(" ", "")
    if t in ("money", "smallmoney"):
        return 4
    return int(t.split(",")[1].rstrip(")")) if "," in t else 0


def _digits(sql_type: str) -> int:
    t = sql_type.lower().replace(" ", "")
    if "(" in t and t.startswith(("time", "datetime2", "datetimeoffset")):
        return int(t.split("(")[1].rstrip(")"))
    return 3 if t in ("datetime", "smalldatetime") else 7


def column_schema(sql_type: str) -> dict:
    """The Kafka Connect schema of a column of this SQL Server type (adaptive time precision,
    precise decimals, bytes)."""
    t = sql_type.lower()
    base = t.split("(")[0]
    if base in ("decimal", "numeric", "money", "smallmoney"):
        precision = {"money": "19", "smallmoney": "10"}.get(base) or t.split("(")[1].split(",")[0]
        return {"type": "bytes", "name": "org.apache.kafka.connect.data.Decimal", "version": 1,
                "parameters": {"scale": str(_scale(t)), "connect.decimal.precision": precision}}
    if base == "date":
        return {"type": "int32", "name": "io.debezium.time.Date", "version": 1}
    if base in ("datetime", "smalldatetime", "datetime2"):
        digits = _digits(t) if base == "datetime2" else 3
        name = "Timestamp" if digits <= 3 else "MicroTimestamp" if digits <= 6 else "NanoTimestamp"
        return {"type": "int64", "name": f"io.debezium.time.{name}", "version": 1}
    if base == "datetimeoffset":
        return {"type": "string", "name": "io.debezium.time.ZonedTimestamp", "version": 1}
    if base in ("binary", "varbinary", "image", "timestamp", "rowversion"):
        return {"type": "bytes"}
    return {"type": {"int": "int32", "bigint": "int64", "smallint": "int16", "tinyint": "int16", "bit": "boolean",
                     "float": "float64", "real": "float32"}.get(base, "string")}


def encode(value: object, sql_type: str) -> object:
    """A value as the JSON converter writes it for a column of this type."""
    if value is None:
        return None
    schema = column_schema(sql_type)
    name = schema.get("name", "")
    if name.endswith("Decimal"):
        unscaled = int(Decimal(value).scaleb(_scale(sql_type)))
        size = max(1, (unscaled.bit_length() + 8) // 8)
        return base64.b64encode(unscaled.to_bytes(size, "big", signed=True)).decode()
    if name.endswith(".Date"):
        return (value - date(1970, 1, 1)).days
    if name.endswith("Timestamp") and isinstance(value, datetime):
        micros = (value - EPOCH) // timedelta(microseconds=1)
        return {"Timestamp": micros // 1000, "MicroTimestamp": micros, "NanoTimestamp": micros * 1000}[name.split(".")[-1]]
    if schema["type"] == "bytes":
        return base64.b64encode(value).decode()
    if isinstance(value, Decimal):
        return float(value)
    return value


def _row(table: TableSpec, values: dict[str, object], options: DebeziumOptions) -> dict:
    row = {c.exported: encode(values[c.name], c.type) for c in table.columns}
    if options.avro_unions:
        types = {"boolean": "boolean", "int16": "int", "int32": "int", "int64": "long", "float64": "double",
                 "float32": "float", "bytes": "bytes", "string": "string"}
        for c in table.columns:
            if c.name not in table.key and row[c.exported] is not None:
                kind = types[column_schema(c.type)["type"]]
                value = row[c.exported]
                if kind == "bytes":  # Avro-JSON bytes: one ISO-8859-1 character per byte
                    value = base64.b64decode(value).decode("latin-1")
                row[c.exported] = {kind: value}
    return row


def _value_schema(table: TableSpec, options: DebeziumOptions) -> dict:
    columns = [{**column_schema(c.type), "optional": c.name not in table.key, "field": c.exported} for c in table.columns]
    _, schema, tbl = table.source or (options.database, "dbo", table.name)
    row_name = f"{options.server}.{schema}.{tbl}.Value"
    if options.flattened:
        return {"type": "struct", "optional": False, "name": row_name, "fields": columns + [
            {"type": "string", "optional": True, "field": f} for f in
            ("__op", "__deleted", "__commit_lsn", "__change_lsn", "__event_serial_no", "__source_ts_ms")]}
    source = [{"type": t, "optional": o, "field": f} for t, o, f in (
        ("string", False, "version"), ("string", False, "connector"), ("string", False, "name"),
        ("int64", False, "ts_ms"), ("string", True, "snapshot"), ("string", False, "db"),
        ("string", False, "schema"), ("string", False, "table"), ("string", True, "change_lsn"),
        ("string", True, "commit_lsn"), ("int64", True, "event_serial_no"))]
    return {"type": "struct", "optional": False, "name": f"{options.server}.{schema}.{tbl}.Envelope", "fields": [
        {"type": "struct", "fields": columns, "optional": True, "name": row_name, "field": "before"},
        {"type": "struct", "fields": columns, "optional": True, "name": row_name, "field": "after"},
        {"type": "struct", "fields": source, "optional": False, "name": "io.debezium.connector.sqlserver.Source",
         "field": "source"},
        {"type": "string", "optional": False, "field": "op"},
        {"type": "int64", "optional": True, "field": "ts_ms"},
    ]}


class Renderer:
    """Turns one table's changes into Debezium records; offsets count per topic."""

    def __init__(self, table: TableSpec, options: DebeziumOptions = DebeziumOptions()):
        self.table = table
        self.options = options
        self.db, self.schema, self.tbl = table.source or (options.database, "dbo", table.name)
        self.topic = f"{options.server}.{self.db}.{self.schema}.{self.tbl}"
        self.offset = 0

    def _millis(self, moment: datetime) -> int:
        return int(moment.replace(tzinfo=timezone.utc).timestamp() * 1000)

    def _event(self, op: str, before: dict | None, after: dict | None, commit_lsn: int, change_lsn: int | None,
               serial: int | None, moment: datetime, snapshot: str = "false") -> dict:
        o = self.options
        serial_value = None if serial is None else (str(serial) if o.serial_as_string else serial)
        source = {"version": "2.7.3.Final", "connector": "sqlserver", "name": o.server, "ts_ms": self._millis(moment),
                  "snapshot": snapshot, "db": self.db, "sequence": None, "schema": self.schema, "table": self.tbl,
                  "change_lsn": None if change_lsn is None else _lsn(change_lsn), "commit_lsn": _lsn(commit_lsn),
                  "event_serial_no": serial_value}
        if o.avro_unions:
            source = {**source, "snapshot": {"string": snapshot}, "commit_lsn": {"string": source["commit_lsn"]},
                      "change_lsn": None if change_lsn is None else {"string": source["change_lsn"]},
                      "event_serial_no": None if serial is None else {"long": serial}}
        if o.flattened:
            row = dict(after if after is not None else before)
            row.update({"__op": op, "__deleted": "true" if op == "d" else "false", "__commit_lsn": source["commit_lsn"],
                        "__change_lsn": source["change_lsn"],
                        "__event_serial_no": None if serial_value is None else str(serial_value),
                        "__source_ts_ms": str(source["ts_ms"])})
            return row
        if o.avro_unions:
            name = f"{o.server}.{self.schema}.{self.tbl}.Value"
            before = None if before is None else {name: before}
            after = None if after is None else {name: after}
        return {"before": before, "after": after, "source": source, "op": op,
                "ts_ms": self._millis(moment) + 1500, "transaction": None}

    def _record(self, key: dict, payload: dict | None) -> str:
        value = payload
        if payload is not None and self.options.schema:
            value = {"schema": _value_schema(self.table, self.options), "payload": payload}
        self.offset += 1
        if self.options.kafka_record:
            return json.dumps({"topic": self.topic, "partition": 0, "offset": self.offset - 1, "key": key,
                               "value": value}, ensure_ascii=False)
        return json.dumps(value, ensure_ascii=False)

    def _key(self, values: dict) -> dict:
        by_name = {c.name: c for c in self.table.columns}
        return {by_name[k].exported: encode(values[k], by_name[k].type) for k in self.table.key}

    def snapshot(self, rows: list[dict[str, object]], commit_lsn: int, moment: datetime,
                 incremental: bool = False) -> list[str]:
        """Snapshot rows (op r): the table's state at commit_lsn, all with that commit LSN, marked
        first, true ... last as a complete snapshot's are (or all incremental)."""
        lines = []
        for i, values in enumerate(rows):
            flag = "incremental" if incremental else "last" if i == len(rows) - 1 else "first" if i == 0 else "true"
            lines.append(self._record(self._key(values), self._event(
                "r", None, _row(self.table, values, self.options), commit_lsn, None, None, moment, flag)))
        return lines

    def changes(self, transactions: list[Transaction]) -> list[str]:
        """The c / u / d events (and tombstones) of the table's changes, in commit order. A
        primary-key update (a delete and an insert of the same row under a new key, next to each
        other) shares its LSNs: delete with serial 1, tombstone, create with serial 2."""
        lines = []
        for tx in transactions:
            rows = sorted(tx.changes.get(self.table.name, []), key=lambda r: (r.seqval, r.operation))
            before: dict[int, ChangeRow] = {r.seqval: r for r in rows if r.operation == 3}
            main = [r for r in rows if r.operation != 3]
            shared: dict[int, int] = {}
            for a, b in itertools.pairwise(main):
                non_key = [c.name for c in self.table.non_key]
                if (a.operation, b.operation) == (1, 2) and all(a.values[n] == b.values[n] for n in non_key):
                    shared[id(b)] = a.seqval
            for r in main:
                row = _row(self.table, r.values, self.options)
                key = self._key(r.values)
                if r.operation == 2:
                    change, serial = shared.get(id(r), r.seqval), 2 if id(r) in shared else 1
                    lines.append(self._record(key, self._event("c", None, row, tx.commit_lsn, change, serial,
                                                               tx.end_time)))
                elif r.operation == 1:
                    lines.append(self._record(key, self._event("d", row, None, tx.commit_lsn, r.seqval, 1, tx.end_time)))
                    if self.options.tombstones:
                        lines.append(self._record(key, None))
                else:
                    old = _row(self.table, before[r.seqval].values, self.options)
                    lines.append(self._record(key, self._event("u", old, row, tx.commit_lsn, r.seqval, 2, tx.end_time)))
        return lines


def write_lines(path: Path, lines: list[str]) -> None:
    """Records as JSON lines, as a Kafka sink connector or consumer writes them."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
