"""Renders a simulated history as SQL Server 2025 Change Event Streaming CloudEvents (JSON), the
shape of Microsoft's published examples (reference ces.md): one event per row change, values as
strings, commit LSN and sequence number in `transaction` and `logicalid`, large messages split
into segments. Options cover the published variants: old values or not, partial updates
(@include_all_columns = 0), 0- or 1-based segment numbering and the early preview form
(`splitindex` / `splittotalcnt`, no `transaction`). Used by the demo and the tests."""

from __future__ import annotations

import json
import random
import uuid
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from cdc_simulator.simulate import ChangeRow, TableSpec, Transaction, lsn_hex

CES_TYPE = "com.microsoft.SQL.CES.DML.V1"
OPERATIONS = {1: "DEL", 2: "INS", 4: "UPD"}


@dataclass(frozen=True)
class CesOptions:
    old_values: bool = True  # UPD and DEL carry the old row (else "{}")
    partial_updates: bool = False  # UPD carries the key and the SET columns only
    segment_size: int | None = None  # split `data` into segments of this many characters
    segment_base: int = 0  # first segmentindex of a split message (0 or 1)
    early_form: bool = False  # splitindex / splittotalcnt and no transaction object
    db_guid: str = "1bf2756a-c15f-4d2e-a2d5-7d3f9dbf85b0"


def text(value: object, sql_type: str) -> str | None:
    """A value as CES sends it: a string (datetime2 with 7 fractional digits, bit as 1/0)."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, datetime):
        if sql_type.lower().startswith("datetime2"):
            return value.strftime("%Y-%m-%d %H:%M:%S.%f") + "0"
        return value.isoformat(sep=" ", timespec="milliseconds")
    return str(value)


def _lsn_colons(value: int) -> str:
    h = lsn_hex(value)
    return f"{h[:8]}:{h[8:16]}:{h[16:]}"


def _image(table: TableSpec, values: dict[str, object], columns=None) -> str:
    chosen = table.columns if columns is None else columns
    return json.dumps({c.exported: text(values[c.name], c.type) for c in chosen}, ensure_ascii=False)


def table_events(table: TableSpec, transactions: list[Transaction], options: CesOptions = CesOptions(),
                 seed: int = 11) -> list[dict]:
    """The CloudEvents (segments included) for `table`'s changes in `transactions`, in commit order."""
    rng = random.Random(seed)
    db, schema, tbl = table.source or (None, "dbo", table.name)
    exported = {c.name: c.exported for c in table.columns}
    cols = [{"name": c.exported, "type": c.type, "index": c.ordinal - 1} for c in table.columns]
    events: list[dict] = []
    for tx in transactions:
        rows = sorted(tx.changes.get(table.name, []), key=lambda r: (r.seqval, r.operation))
        before: dict[int, ChangeRow] = {r.seqval: r for r in rows if r.operation == 3}
        for sequence, row in enumerate((r for r in rows if r.operation != 3), start=1):
            old, current = "{}", "{}"
            if row.operation == 2:
                current = _image(table, row.values)
            elif row.operation == 1:
                old = _image(table, row.values) if options.old_values else "{}"
            else:
                changed = {c.ordinal for c in table.columns
                           if int.from_bytes(row.update_mask, "big") >> (c.ordinal - 1) & 1}
                carried = [c for c in table.columns if c.name in table.key or c.ordinal in changed]
                current = _image(table, row.values, carried if options.partial_updates else None)
                if options.old_values:
                    old = _image(table, before[row.seqval].values, carried if options.partial_updates else None)
            source = {"db": db or "db1", "schema": schema, "tbl": tbl, "cols": cols,
                      "pkkey": [{"columnname": exported[k], "value": text(row.values[k], "")} for k in table.key]}
            if not options.early_form:
                source["transaction"] = {
                    "commitlsn": _lsn_colons(tx.commit_lsn), "beginlsn": _lsn_colons(tx.begin_lsn),
                    "sequencenumber": sequence, "finalevent": False,
                    # CES writes the server's wall clock with a Z suffix
                    "committime": tx.end_time.isoformat(timespec="milliseconds") + "Z",
                }
            data = json.dumps({"eventsource": source, "eventrow": {"old": old, "current": current}},
                              ensure_ascii=False, separators=(",", ":"))
            logicalid = f"{options.db_guid}:{lsn_hex(tx.commit_lsn)}:{sequence:020d}"
            events.extend(segments(data, logicalid, OPERATIONS[row.operation], tx.end_time, options, rng))
    return events


def segments(data: str, logicalid: str, operation: str, time: datetime, options: CesOptions,
              rng: random.Random) -> list[dict]:
    """One message as CloudEvents: unsplit, or split into segments of options.segment_size characters."""
    size = options.segment_size or len(data)
    pieces = [data[i:i + size] for i in range(0, len(data), size)] or [""]
    segments = []
    for i, piece in enumerate(pieces):
        event = {
            "specversion": "1.0", "type": CES_TYPE, "source": "/", "id": str(uuid.UUID(int=rng.getrandbits(128))),
            "logicalid": logicalid, "time": time.isoformat(timespec="milliseconds") + "Z",
            "datacontenttype": "application/json", "operation": operation,
        }
        if options.early_form:
            event["splitindex"] = i + options.segment_base if len(pieces) > 1 else 0
            event["splittotalcnt"] = len(pieces) if len(pieces) > 1 else 0
        else:
            event["segmentindex"] = i + options.segment_base
            event["finalsegment"] = i == len(pieces) - 1
        event["data"] = piece
        segments.append(event)
    return segments


def write_lines(path: Path, events: list[dict]) -> None:
    """Events as JSON lines, as an Event Hubs or Kafka consumer writes them."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as f:
        for event in events:
            f.write(json.dumps(event, ensure_ascii=False) + "\n")
