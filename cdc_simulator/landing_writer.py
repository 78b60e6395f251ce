"""Writes a simulated history as landing files, the way exports of a real SQL Server look:
change tables as Parquet (binary LSNs) or CSV / JSON lines (0x hex text), and the CDC
metadata tables. One set of files per batch; the batch boundary may fall anywhere."""

from __future__ import annotations

import csv
import json
import tempfile
from datetime import datetime
from decimal import Decimal
from pathlib import Path

from cdc_simulator.simulate import ChangeRow, TableSpec, Transaction, lsn_hex

CT_META = ("__$start_lsn", "__$end_lsn", "__$seqval", "__$operation", "__$update_mask")


def _text(value: object) -> object:
    if value is None:
        return None
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, datetime):
        return value.isoformat(sep=" ", timespec="milliseconds")
    if isinstance(value, bytes):
        return "0x" + value.hex().upper()
    return str(value)


def _change_record(table: TableSpec, row: ChangeRow, binary: bool) -> dict[str, object]:
    def lsn(v: int) -> object:
        return bytes.fromhex(lsn_hex(v)) if binary else "0x" + lsn_hex(v)

    record: dict[str, object] = {
        "__$start_lsn": lsn(row.start_lsn),
        "__$end_lsn": None,
        "__$seqval": lsn(row.seqval),
        "__$operation": row.operation,
        "__$update_mask": row.update_mask if binary else "0x" + row.update_mask.hex().upper(),
    }
    for c in table.columns:
        record[c.exported] = row.values[c.name]
    record["__$command_id"] = row.command_id
    return record


def _arrow_type(sql_type: str):
    """The Parquet type an export tool writes a SQL Server column as (what Spark reads it as: decimal(19, 4)
    for decimal and money, smallint for tinyint, a UTC timestamp for the datetimes, text otherwise)."""
    import pyarrow as pa

    t = sql_type.lower()
    if t.startswith(("decimal", "numeric", "money")):
        return pa.decimal128(19, 4)
    return {
        "int": pa.int32(), "bigint": pa.int64(), "smallint": pa.int16(), "tinyint": pa.int16(), "bit": pa.bool_(),
        "date": pa.date32(),
    }.get(t.split("(")[0], pa.timestamp("us", tz="UTC") if t.startswith("datetime") else pa.string())


def _write_parquet(path: Path, table: TableSpec, records: list[dict[str, object]]) -> None:
    """One Parquet file of the change rows, with pyarrow (no Spark: the demo's data is written before
    the runner starts its JVM); the LSNs and the update mask binary, as SQL Server's binary(10) and
    varbinary(128). The simulator's times are UTC."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    fields = [
        pa.field("__$start_lsn", pa.binary()), pa.field("__$end_lsn", pa.binary()),
        pa.field("__$seqval", pa.binary()), pa.field("__$operation", pa.int32()),
        pa.field("__$update_mask", pa.binary()),
        *[pa.field(c.exported, _arrow_type(c.type)) for c in table.columns],
        pa.field("__$command_id", pa.int32()),
    ]
    schema = pa.schema(fields)
    columns = [pa.array([r[f.name] for r in records], f.type) for f in fields]
    # written under a hidden name (the runner skips it) and renamed: whole or not at all, as an export tool's
    with tempfile.NamedTemporaryFile(dir=path.parent, prefix=".", suffix=".parquet", delete=False) as tmp:
        pq.write_table(pa.Table.from_arrays(columns, schema=schema), tmp.name)
    Path(tmp.name).replace(path)


def _write_csv(path: Path, records: list[dict[str, object]], header: list[str]) -> None:
    with path.open("w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=header)
        writer.writeheader()
        for r in records:
            writer.writerow({k: _text(v) for k, v in r.items()})


def _write_jsonl(path: Path, records: list[dict[str, object]]) -> None:
    def default(v: object) -> object:
        return float(v) if isinstance(v, Decimal) else _text(v)

    with path.open("w", encoding="utf-8") as f:
        for r in records:
            f.write(json.dumps({k: (_text(v) if isinstance(v, (bytes, datetime, bool)) else v) for k, v in r.items()},
                               default=default, ensure_ascii=False) + "\n")


def write_batch(landing: Path, batch: str, tables: list[TableSpec], transactions: list[Transaction],
                formats: dict[str, str], min_lsn: dict[str, int] | None = None,
                mapped: list[Transaction] | None = None, manifest: tuple[int | None, int] | None = None) -> None:
    """Writes the change rows of `transactions` and the lsn_time_mapping rows of `mapped`
    (default: the same transactions) as batch `batch`. formats maps table name to 'parquet' |
    'csv' | 'jsonl'. min_lsn (capture instance to LSN) writes a cdc.change_tables export with
    that validity low end. manifest (after_lsn, through_lsn) writes each capture instance's export
    manifest for that range (docs/landing.md "Export manifests"), also for an instance without changes."""
    for table in tables:
        if table.channel == "change_tables":
            write_export(landing, batch, table, transactions, formats.get(table.name, "csv"), *(manifest or (None, None)))
    mapping = landing / "cdc_metadata" / "lsn_time_mapping"
    mapping.mkdir(parents=True, exist_ok=True)
    _write_jsonl(mapping / f"{batch}.jsonl", [
        {"start_lsn": "0x" + lsn_hex(tx.commit_lsn), "tran_begin_time": tx.begin_time, "tran_end_time": tx.end_time,
         "tran_id": "0x" + f"{tx.begin_lsn:012X}", "tran_begin_lsn": "0x" + lsn_hex(tx.begin_lsn)}
        for tx in (transactions if mapped is None else mapped)
    ])
    if min_lsn:
        write_change_tables(landing, batch, tables, min_lsn)


def write_export(landing: Path, batch: str, table: TableSpec, transactions: list[Transaction], fmt: str = "csv",
                 after: int | None = None, through: int | None = None) -> None:
    """One capture instance's export of batch `batch`: its change rows in `transactions` as one
    file (none when it has none) and, when `through` is given, the export manifest for the range
    (after, through] written last, as an exporter must (docs/landing.md "Export manifests")."""
    rows = [r for tx in transactions for r in tx.changes.get(table.name, [])]
    folder = landing / "change_tables" / table.capture_instance
    folder.mkdir(parents=True, exist_ok=True)
    files = []
    if rows:
        records = [_change_record(table, r, binary=fmt == "parquet") for r in rows]
        target = folder / f"{batch}.{fmt}"
        if fmt == "parquet":
            _write_parquet(target, table, records)
        elif fmt == "jsonl":
            _write_jsonl(target, records)
        else:
            _write_csv(target, records, [*CT_META, *(c.exported for c in table.columns), "__$command_id"])
        files.append({"path": target.name, "rows": len(records), "bytes": target.stat().st_size})
    if through is not None:
        (folder / f"{batch}.manifest.json").write_text(json.dumps({
            "capture_instance": table.capture_instance,
            "after_lsn": None if after is None else "0x" + lsn_hex(after),
            "through_lsn": "0x" + lsn_hex(through),
            "files": files,
        }, indent=2) + "\n")


def write_change_tables(landing: Path, batch: str, tables: list[TableSpec], min_lsn: dict[str, int]) -> None:
    """A cdc.change_tables export joined with what sys.sp_cdc_help_change_data_capture adds: the
    source schema and table (the demo's capture instances are named <schema>_<table>, SQL
    Server's default) and the key's index_column_list."""
    folder = landing / "cdc_metadata" / "change_tables"
    folder.mkdir(parents=True, exist_ok=True)
    _write_csv(folder / f"{batch}.csv", [
        {"object_id": 1000 + i, "capture_instance": t.capture_instance, "start_lsn": "0x" + lsn_hex(min_lsn[t.capture_instance]),
         "supports_net_changes": 1, "index_name": "pk_" + t.name, **_source_of(t.capture_instance), "index_column_list": ", ".join(f"[{k}]" for k in t.key)}
        for i, t in enumerate(tables) if t.capture_instance in min_lsn
    ], ["object_id", "capture_instance", "start_lsn", "supports_net_changes", "index_name", "source_schema", "source_table",
        "index_column_list"])


def _source_of(capture_instance: str) -> dict[str, str]:
    schema, _, table = capture_instance.partition("_")
    return {"source_schema": schema, "source_table": table} if table else {"source_schema": "dbo", "source_table": schema}


def _type_parts(sql_type: str) -> dict[str, object]:
    """cdc.captured_columns.column_type is the bare type name; the length, precision, scale and
    fraction digits come from INFORMATION_SCHEMA.COLUMNS (docs/tables.md "Scaffolding")."""
    base, _, args = sql_type.lower().partition("(")
    args = [a.strip() for a in args.rstrip(")").split(",")] if args else []
    parts: dict[str, object] = {"column_type": base, "character_maximum_length": None, "numeric_precision": None,
                                "numeric_scale": None, "datetime_precision": None}
    if args and base in ("char", "varchar", "nchar", "nvarchar", "binary", "varbinary"):
        parts["character_maximum_length"] = -1 if args[0] == "max" else int(args[0])
    elif args and base in ("decimal", "numeric"):
        parts["numeric_precision"], parts["numeric_scale"] = int(args[0]), int(args[1]) if len(args) > 1 else 0
    elif args:
        parts["datetime_precision"] = int(args[0])
    return parts


def write_captured_columns(landing: Path, tables: list[TableSpec], batch: str = "captured_columns") -> None:
    folder = landing / "cdc_metadata" / "captured_columns"
    folder.mkdir(parents=True, exist_ok=True)
    _write_csv(folder / f"{batch}.csv", [
        {"object_id": 1000 + i, "column_name": c.exported, "column_id": c.ordinal, "column_ordinal": c.ordinal, "is_computed": 0,
         **_type_parts(c.type)}
        for i, t in enumerate(tables) if t.channel == "change_tables" for c in t.columns
    ], ["object_id", "column_name", "column_id", "column_type", "column_ordinal", "is_computed", "character_maximum_length",
        "numeric_precision", "numeric_scale", "datetime_precision"])


def write_snapshot(landing: Path, batch: str, table: TableSpec, rows: list[dict[str, object]], snapshot_lsn: int) -> None:
    """A snapshot of a table (docs/landing.md "Snapshots"): its rows as of `snapshot_lsn` as a CSV file in
    snapshots/<table>/, and its manifest, written last."""
    folder = landing / "snapshots" / table.name
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / f"{batch}.csv"
    _write_csv(target, [{c.exported: r[c.name] for c in table.columns} for r in rows], [c.exported for c in table.columns])
    (folder / f"{batch}.manifest.json").write_text(json.dumps({
        "table": table.name, "snapshot_lsn": "0x" + lsn_hex(snapshot_lsn),
        "files": [{"path": target.name, "rows": len(rows), "bytes": target.stat().st_size}],
    }, indent=2) + "\n")
