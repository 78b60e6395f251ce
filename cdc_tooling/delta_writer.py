"""Delta commits made without Spark's jobs, for the aging phase's generated runs (cdc_tooling/aging.py):
the data files written with pyarrow, the deletion vectors in Delta's file format (pyroaring's
bitmaps), the statistics computed as Delta computes them, and each commit made by Delta's own
transaction (`OptimisticTransaction.commit` through py4j), so that Delta writes the commit, its
checksum file and its checkpoints as it does for a Spark write. A generated run costs a few tenths
of a second instead of a run's Spark jobs (about 9 s on two cores), so thousands of runs fit in
minutes; what they leave is Delta's own: the maintenance pass, OPTIMIZE, VACUUM and every read see
tables as Spark would have written them (docs/performance.md "Maintenance" shows the two equal).

Formats (Delta's PROTOCOL.md): a deletion vector file is a version byte (1), then per deletion
vector its size (4 bytes, big endian), the bitmap (the magic number 1681511377, then the 64-bit
RoaringBitmap in the portable format: the number of 32-bit buckets, each bucket's key and its
standard 32-bit serialization; all little endian) and a CRC-32 of the bitmap (big endian). A
descriptor names the file by the Z85 encoding of its UUID. Statistics: numRecords, then minValues
and maxValues of the first 32 leaf columns of a type Delta skips on (numbers, strings cut to 32
characters, dates, timestamps in milliseconds), nullCount of each, and tightBounds on tables with
deletion vectors; partition columns have none."""

from __future__ import annotations

import json
import struct
import time
import uuid
import zlib
from dataclasses import dataclass
from datetime import date, timezone
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

MAGIC = 1681511377  # the portable RoaringBitmapArray format
NATIVE_MAGIC = 1681511376  # Delta's other format, which it reads too
Z85 = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#"
STRING_PREFIX = 32  # delta.dataSkippingStringPrefixLength's default
INDEXED_COLUMNS = 32  # delta.dataSkippingNumIndexedCols' default
ASCII_MAX, UTF8_MAX = "\x7f", "\U0010ffff"
SKIPPED_ON = ("byte", "short", "integer", "long", "float", "double", "string", "date", "timestamp", "timestamp_ntz")


# --- Z85 and deletion vectors ---------------------------------------------------------------

def z85_encode(data: bytes) -> str:
    if len(data) % 4:
        raise ValueError(f"Z85 encodes whole 4-byte blocks; got {len(data)} bytes")
    out = []
    for (block,) in struct.iter_unpack(">I", data):
        digits = []
        for _ in range(5):
            block, digit = divmod(block, 85)
            digits.append(Z85[digit])
        out.extend(reversed(digits))
    return "".join(out)


def z85_decode(text: str) -> bytes:
    if len(text) % 5:
        raise ValueError(f"Z85 decodes whole 5-character blocks; got {len(text)} characters")
    out = bytearray()
    for i in range(0, len(text), 5):
        value = 0
        for c in text[i:i + 5]:
            value = value * 85 + Z85.index(c)
        out += struct.pack(">I", value)
    return bytes(out)


def dv_bitmap(rows) -> bytes:
    """A deletion vector's bitmap (magic number and portable 64-bit RoaringBitmap) of row indexes."""
    from pyroaring import BitMap

    buckets: dict[int, list[int]] = {}
    for row in sorted(int(r) for r in rows):
        if row < 0 or row >= 1 << 63:
            raise ValueError(f"a row index must be in [0, 2^63): {row}")
        buckets.setdefault(row >> 32, []).append(row & 0xFFFFFFFF)
    parts = [struct.pack("<iq", MAGIC, len(buckets))]
    for key in sorted(buckets):
        parts.append(struct.pack("<i", key) + BitMap(buckets[key]).serialize())
    return b"".join(parts)


def dv_rows(data: bytes) -> set[int]:
    """The row indexes of a deletion vector's bitmap, in either of Delta's two formats."""
    from pyroaring import BitMap

    (magic,) = struct.unpack_from("<i", data)
    rows: set[int] = set()
    if magic == MAGIC:
        (count,), at = struct.unpack_from("<q", data, 4), 12
        for _ in range(count):
            (key,) = struct.unpack_from("<i", data, at)
            bitmap = BitMap.deserialize(data[at + 4:])
            rows.update((key << 32) | r for r in bitmap)
            at += 4 + len(bitmap.serialize())
    elif struct.unpack_from(">i", data)[0] == NATIVE_MAGIC:
        (count,), at = struct.unpack_from(">i", data, 4), 8
        for key in range(count):
            (size,) = struct.unpack_from(">i", data, at)
            rows.update((key << 32) | r for r in BitMap.deserialize(data[at + 4:at + 4 + size]))
            at += 4 + size
    else:
        raise ValueError(f"not a deletion vector: magic number {magic}")
    return rows


def write_dv_file(root: Path, bitmaps: list[set[int]]) -> list[dict]:
    """One deletion vector file in `root` holding `bitmaps`; their descriptors, in order."""
    name = uuid.uuid4()
    body, descriptors = bytearray(b"\x01"), []
    for rows in bitmaps:
        data = dv_bitmap(rows)
        descriptors.append({"storageType": "u", "pathOrInlineDv": z85_encode(name.bytes), "offset": len(body),
                            "sizeInBytes": len(data), "cardinality": len(rows)})
        body += struct.pack(">i", len(data)) + data + struct.pack(">I", zlib.crc32(data))
    (root / f"deletion_vector_{name}.bin").write_bytes(bytes(body))
    return descriptors


def read_dv(root: Path, descriptor: dict | None) -> set[int]:
    """The rows a file's deletion vector descriptor deletes (none: an empty set)."""
    if not descriptor:
        return set()
    kind, where = descriptor["storageType"], descriptor["pathOrInlineDv"]
    if kind == "i":
        return dv_rows(z85_decode(where))
    if kind == "u":
        prefix, name = where[:-20], uuid.UUID(bytes=z85_decode(where[-20:]))
        path = root / prefix / f"deletion_vector_{name}.bin"
    else:
        path = Path(where.removeprefix("file:"))
    with open(path, "rb") as f:
        f.seek(int(descriptor.get("offset") or 0))
        (size,) = struct.unpack(">i", f.read(4))
        data = f.read(size)
        (crc,) = struct.unpack(">I", f.read(4))
    if zlib.crc32(data) != crc:
        raise ValueError(f"deletion vector {path}@{descriptor.get('offset')}: checksum mismatch")
    return dv_rows(data)


# --- statistics -----------------------------------------------------------------------------

class _Number(str):
    """A number's JSON text as it is (a decimal's scale kept, as Jackson writes a BigDecimal)."""


def _json(value) -> str:
    """JSON as Delta's Jackson writes stats: compact, decimals as written."""
    if isinstance(value, dict):
        return "{" + ",".join(f"{json.dumps(k)}:{_json(v)}" for k, v in value.items()) + "}"
    if isinstance(value, _Number):
        return str(value)
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _java_length(text: str) -> int:
    return len(text.encode("utf-16-le")) // 2


def _java_take(text: str, units: int) -> str:
    return text.encode("utf-16-le")[:2 * units].decode("utf-16-le", errors="ignore")


def truncate_min(text: str, prefix: int = STRING_PREFIX) -> str | None:
    """Delta's StatisticsCollection.truncateMinStringAgg, on UTF-16 code units as Java counts."""
    if _java_length(text) <= prefix:
        return text
    if prefix <= 0:
        return None
    units = text.encode("utf-16-le")
    high = int.from_bytes(units[2 * prefix - 2:2 * prefix], "little")
    return _java_take(text, prefix + 1 if 0xD800 <= high <= 0xDBFF else prefix)


def truncate_max(text: str, prefix: int = STRING_PREFIX) -> str | None:
    """Delta's StatisticsCollection.truncateMaxStringAgg: the prefix and a tie-breaker greater
    than any character it cut off (None when no prefix up to twice the length can carry one)."""
    if _java_length(text) <= prefix:
        return text
    if prefix <= 0:
        return None
    taken = truncate_min(text, prefix)
    while _java_length(taken) <= 2 * prefix:
        rest = text[len(taken):]
        if not rest:
            return text
        if rest[0] == UTF8_MAX:
            taken += rest[0]
        elif rest[0] < ASCII_MAX:
            return taken + ASCII_MAX
        else:
            return taken + UTF8_MAX
    return None


def _stat_value(kind: str, value, maximum: bool):
    if value is None:
        return None
    if kind == "string":
        return truncate_max(value) if maximum else truncate_min(value)
    if kind.startswith("decimal"):
        return _Number(format(value, "f") if isinstance(value, Decimal) else value)
    if kind in ("timestamp", "timestamp_ntz"):
        # milliseconds, cut (not rounded), as Spark's to_json writes them; a session in UTC
        if value.tzinfo is None:
            value = value.replace(tzinfo=timezone.utc)
        text = value.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3]
        return text + ("Z" if kind == "timestamp" else "")
    if isinstance(value, date):
        return value.isoformat()
    return value


def stats(table: pa.Table, schema: dict, partition_columns: tuple[str, ...] = (), tight_bounds: bool = False) -> str:
    """The `stats` of an add action for `table`'s rows (a file's), `schema` the Delta schema (its
    schemaString, read)."""
    found: dict = {"numRecords": table.num_rows}
    mins: dict = {}
    maxs: dict = {}
    nulls: dict = {}
    budget = [INDEXED_COLUMNS]

    def walk(fields: list[dict], column_of, into_min: dict, into_max: dict, into_nulls: dict) -> None:
        for f in fields:
            if budget[0] <= 0:
                return
            column = column_of(f["name"])
            kind = f["type"]
            if isinstance(kind, dict) and kind.get("type") == "struct":
                mins_, maxs_, nulls_ = {}, {}, {}
                walk(kind["fields"], lambda n, c=column: pc.struct_field(c, n) if c is not None else None,
                     mins_, maxs_, nulls_)
                if mins_:
                    into_min[f["name"]] = mins_
                if maxs_:
                    into_max[f["name"]] = maxs_
                into_nulls[f["name"]] = nulls_
                continue
            budget[0] -= 1
            if column is None:
                into_nulls[f["name"]] = table.num_rows
                continue
            into_nulls[f["name"]] = column.null_count
            name = kind if isinstance(kind, str) else ""
            if name in SKIPPED_ON or name.startswith("decimal"):
                extremes = pc.min_max(column).as_py()
                low = _stat_value(name, extremes["min"], False)
                high = _stat_value(name, extremes["max"], True)
                if low is not None:
                    into_min[f["name"]] = low
                if high is not None:
                    into_max[f["name"]] = high

    data = [f for f in schema["fields"] if f["name"] not in partition_columns]
    walk(data, lambda n: table.column(n) if n in table.column_names else None, mins, maxs, nulls)
    found.update({"minValues": mins, "maxValues": maxs, "nullCount": nulls})
    if tight_bounds:
        found["tightBounds"] = True
    return _json(found)


# --- commits through Delta's own transaction ------------------------------------------------

@dataclass
class Written:
    """A data file the writer wrote: its add action and its rows (as written)."""

    add: dict
    rows: pa.Table


class DeltaTable:
    """A Delta table the generator writes: its live files (add actions, from Delta's snapshot, kept
    up to date by the writer's own commits and read again whenever another writer committed), their
    rows read on demand, and the commits `append`, `overwrite` and `merge`."""

    def __init__(self, spark, location: str | Path):
        self.spark = spark
        self.root = Path(str(location).removeprefix("file:"))
        jvm = spark._jvm
        self._jvm = jvm
        self.log = jvm.org.apache.spark.sql.delta.DeltaLog.forTable(spark._jsparkSession, str(self.root))
        self.version = -1
        self.files: dict[str, dict] = {}
        self._rows: dict[str, pa.Table] = {}
        self._metrics: dict = {}
        self._registered: dict = {}
        self._operations: dict = {}
        self._sync(self.log.startTransaction())
        sample = next((p for p in sorted(self.files) if self.files[p]["size"] > 0), None)
        if sample is None:
            raise ValueError(f"{self.root}: the generator writes tables with at least one data file, as a "
                             "run leaves them (it takes their file schema from one)")
        self.file_schema = pq.read_schema(self.root / sample)

    # the snapshot
    def _sync(self, txn) -> None:
        """The live files as the transaction's snapshot holds them, when another writer committed."""
        version = txn.readVersion()
        if version == self.version:
            return
        snapshot = txn.snapshot()
        metadata = snapshot.metadata()
        self.schema = json.loads(metadata.schemaString())
        self.partition_columns = tuple(self._jvm.scala.jdk.javaapi.CollectionConverters.asJava(
            metadata.partitionColumns()))
        enabled = metadata.configuration().get("delta.enableDeletionVectors")
        self.deletion_vectors = bool(enabled.isDefined()) and enabled.get() == "true"
        self.files = {a["path"]: a for a in (json.loads(j) for j in snapshot.allFiles().toJSON().collectAsList())}
        self._rows = {p: r for p, r in self._rows.items() if p in self.files}
        self.version = version

    def rows(self, path: str) -> pa.Table:
        """A live file's rows (all of them, its deletion vector not applied)."""
        if path not in self._rows:
            self._rows[path] = pq.read_table(self.root / path)
        return self._rows[path]

    def deleted(self, path: str) -> set[int]:
        return read_dv(self.root, self.files[path].get("deletionVector"))

    def refresh(self) -> None:
        """The live files read again if another writer (Spark, a maintenance pass) committed since."""
        self._sync(self.log.startTransaction())

    # files
    def _write(self, rows: pa.Table, partition: dict[str, str] | None = None) -> Written:
        rows = rows.select(self.file_schema.names).cast(self.file_schema)
        folder = "/".join(f"{k}={v}" for k, v in (partition or {}).items())
        name = f"part-00000-{uuid.uuid4()}-c000.snappy.parquet"
        path = f"{folder}/{name}" if folder else name
        (self.root / path).parent.mkdir(parents=True, exist_ok=True)
        # as Spark writes them (INT96 timestamps, decimals as integers, a page index), without
        # Arrow's own schema in the footer: the files are within a fifth of Spark's sizes
        pq.write_table(rows, self.root / path, compression="snappy", use_deprecated_int96_timestamps=True,
                       store_decimal_as_integer=True, write_page_index=True, store_schema=False)
        stat = (self.root / path).stat()
        add = {"path": path, "partitionValues": dict(partition or {}), "size": stat.st_size,
               "modificationTime": int(stat.st_mtime * 1000), "dataChange": True, "tags": None,
               "stats": stats(rows, self.schema, self.partition_columns, self.deletion_vectors)}
        self._rows[path] = rows
        return Written(add, rows)

    # commits
    def _commit(self, txn, actions: list[dict], operation: str, metrics: dict[str, int]) -> int:
        """Commits `actions` as Delta operation `operation` (Append, Overwrite, Merge) whose history
        reports `metrics`: Delta's transaction writes the commit, its checksum and checkpoint."""
        jvm = self._jvm
        found = jvm.java.util.ArrayList()
        for action in actions:
            found.add(jvm.org.apache.spark.sql.delta.actions.Action.fromJson(json.dumps(action)))
        for name, value in metrics.items():
            self._metric(name).set(int(value))
        names = frozenset(metrics)
        if names not in self._registered:  # the map of the metric objects, made once per set of names
            registered = jvm.java.util.HashMap()
            for name in names:
                registered.put(name, self._metric(name))
            self._registered[names] = _scala_map(jvm, registered)
        txn.registerSQLMetrics(self.spark._jsparkSession, self._registered[names])
        version = txn.commit(jvm.scala.jdk.javaapi.CollectionConverters.asScala(found).toSeq(), self._operation(operation))
        self.version = version
        return version

    def _metric(self, name: str):
        if name not in self._metrics:
            self._metrics[name] = self._jvm.org.apache.spark.sql.execution.metric.SQLMetrics.createMetric(
                self.spark.sparkContext._jsc.sc(), name)
        return self._metrics[name]

    def _operation(self, name: str):
        """Delta's operation object: a WRITE (mode Append or Overwrite), or a MERGE."""
        if name not in self._operations:
            jvm = self._jvm
            empty = jvm.scala.jdk.javaapi.CollectionConverters.asScala(jvm.java.util.ArrayList()).toSeq()
            none = jvm.scala.Option.empty()
            if name == "Merge":
                merge = _module(jvm, "org.apache.spark.sql.delta.DeltaOperations$Merge$")
                self._operations[name] = merge.apply(none, empty, empty, empty)
            else:
                write = getattr(jvm.org.apache.spark.sql.delta, "DeltaOperations$Write")
                self._operations[name] = write(getattr(jvm.org.apache.spark.sql.SaveMode, name),
                                               jvm.scala.Option.apply(empty), none, none, none, none, none, none, none)
        return self._operations[name]

    def append(self, parts: list[tuple[pa.Table, dict[str, str] | None]]) -> int:
        """One WRITE (Append) commit of a file per part (rows, partition values)."""
        txn = self.log.startTransaction()
        self._sync(txn)
        written = [self._write(rows, partition) for rows, partition in parts]
        for w in written:
            self.files[w.add["path"]] = w.add
        return self._commit(txn, [{"add": w.add} for w in written], "Append", {
            "numFiles": len(written), "numOutputRows": sum(w.rows.num_rows for w in written),
            "numOutputBytes": sum(w.add["size"] for w in written)})

    def overwrite(self, rows: pa.Table) -> int:
        """One WRITE (Overwrite) commit: every live file removed, `rows` in one file."""
        txn = self.log.startTransaction()
        self._sync(txn)
        removed = [self._remove(a, stats=False) for a in self.files.values()]
        written = self._write(rows)
        self.files = {written.add["path"]: written.add}
        return self._commit(txn, [{"add": written.add}, *removed], "Overwrite", {
            "numFiles": 1, "numOutputRows": rows.num_rows, "numOutputBytes": written.add["size"],
            "numRemovedFiles": len(removed), "numRemovedBytes": sum(r["remove"]["size"] for r in removed)})

    def merge(self, matched: dict[str, list[int]], added: pa.Table, updated: int, inserted: int,
              source_rows: int) -> str:
        """One MERGE commit as Delta makes it with deletion vectors: the `matched` rows of each file
        (path: row indexes) deleted by a new deletion vector on that file (the file re-added with
        it, its bounds no longer tight), `added` in a new file; `updated` and `inserted` rows.
        Returns the new file's path."""
        txn = self.log.startTransaction()
        self._sync(txn)
        paths = sorted(p for p, rows in matched.items() if rows)
        before = {p: self.deleted(p) for p in paths}
        after = [before[p] | set(matched[p]) for p in paths]
        descriptors = write_dv_file(self.root, after) if paths else []
        actions: list[dict] = []
        replaced = 0
        for path, descriptor in zip(paths, descriptors):
            old = self.files[path]
            replaced += 1 if old.get("deletionVector") else 0
            add = {**old, "dataChange": True, "deletionVector": descriptor,
                   "stats": _loose(old.get("stats"))}
            actions.append({"add": add})
            actions.append(self._remove(old))
            self.files[path] = add
        written = self._write(added)
        self.files[written.add["path"]] = written.add
        actions.insert(0, {"add": written.add})
        self._commit(txn, actions, "Merge", {
            "operationNumSourceRows": source_rows, "numSourceRows": source_rows,
            "numTargetRowsInserted": inserted, "numTargetRowsUpdated": updated,
            "numTargetRowsMatchedUpdated": updated, "numTargetRowsNotMatchedBySourceUpdated": 0,
            "numTargetRowsDeleted": 0, "numTargetRowsMatchedDeleted": 0, "numTargetRowsNotMatchedBySourceDeleted": 0,
            "numTargetRowsCopied": 0, "numOutputRows": added.num_rows, "numTargetFilesAdded": 1,
            "numTargetFilesRemoved": 0, "numTargetChangeFilesAdded": 0, "numTargetBytesAdded": written.add["size"],
            # Delta's counts: a deletion vector on a file without one is added, one that replaces
            # another is updated (its history reports the updated among the added and the removed)
            "numTargetBytesRemoved": 0, "numTargetDeletionVectorsAdded": len(paths) - replaced,
            "numTargetDeletionVectorsRemoved": 0, "numTargetDeletionVectorsUpdated": replaced,
            "executionTimeMs": 0, "materializeSourceTimeMs": 0, "scanTimeMs": 0, "rewriteTimeMs": 0})
        return written.add["path"]

    def insert_merge(self, rows: pa.Table) -> str:
        """An insert-only MERGE (no target row matched): `rows` in one new file."""
        return self.merge({}, rows, 0, rows.num_rows, rows.num_rows)

    def _remove(self, add: dict, stats: bool = True) -> dict:
        """The remove action of a live file (with its record count, as a MERGE's; an overwrite's without)."""
        remove = {"path": add["path"], "deletionTimestamp": int(time.time() * 1000), "dataChange": True,
                  "extendedFileMetadata": True, "partitionValues": add.get("partitionValues") or {},
                  "size": add["size"]}
        if add.get("deletionVector"):
            remove["deletionVector"] = add["deletionVector"]
        if stats and add.get("stats"):
            remove["stats"] = _json({"numRecords": json.loads(add["stats"])["numRecords"]})
        return {"remove": remove}


def _loose(stats_text: str | None) -> str | None:
    """A file's stats once a deletion vector hides some of its rows: its bounds no longer tight."""
    if not stats_text:
        return stats_text
    found = json.loads(stats_text, parse_float=lambda s: _Number(s))
    found["tightBounds"] = False
    return _json(found)


def _module(jvm, name: str):
    """A Scala object (`scala.collection.immutable.Map$`, ...): its MODULE$ field."""
    package, _, cls = name.rpartition(".")
    holder = jvm
    for part in package.split("."):
        holder = getattr(holder, part)
    return getattr(getattr(holder, cls), "MODULE$")


def _scala_map(jvm, java_map):
    """A Scala immutable Map of a java.util.Map."""
    converters = jvm.scala.jdk.javaapi.CollectionConverters
    return getattr(_module(jvm, "scala.collection.immutable.Map$"), "from")(converters.asScala(java_map))
