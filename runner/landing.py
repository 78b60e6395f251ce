"""Lands files from the landing folder into the one raw table, `<raw schema>.landed_rows`.

Landing contract (README "Landing"): `change_tables/<capture_instance>/` and
`cdc_metadata/{lsn_time_mapping,change_tables,captured_columns}/`, files in any sub-folder, as
Parquet (`.parquet`), CSV with a header (`.csv`) or JSON lines (`.json`, `.jsonl`); and `ces/`
(optionally `ces/<event hub or topic>/`), CloudEvents as JSON lines; and `debezium/` (optionally
`debezium/<topic>/`), Debezium change events as JSON lines.
Every record becomes a map of lower-cased column names to text (binary as `0x` hex; nested JSON
as its JSON text) plus the file it came from and the batch id; JSON lines also keep their text,
so a line that is not a JSON object reaches quarantine as it was. A file already landed (same path relative to the landing
folder) is never landed again, so re-running over the same files adds nothing twice.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from runner.errors import UsageError

KINDS = ("change_tables", "cdc_metadata", "ces", "debezium")
FORMATS = {".parquet": "parquet", ".csv": "csv", ".json": "json", ".jsonl": "json"}
# CES and Debezium events are routed by their own db.schema.table (Debezium: or by topic, the
# sub-folder), so files may sit directly in ces/ or debezium/ too.
FLAT_KINDS = {"ces": ("json",), "debezium": ("json",)}
FLAT_ENTITY = "default"
RAW_TABLE = "landed_rows"


@dataclass(frozen=True)
class LandedFile:
    kind: str
    entity: str
    path: Path
    relative: str

    @property
    def fmt(self) -> str:
        return FORMATS[self.path.suffix.lower()]


def discover(landing_dir: Path) -> list[LandedFile]:
    """All landable files under the landing folder, in a stable order."""
    if not landing_dir.is_dir():
        raise UsageError(f"landing folder {landing_dir} does not exist; pass --landing DIR")
    found = []
    for kind in KINDS:
        root = landing_dir / kind
        for path in sorted(root.rglob("*")):
            if not path.is_file() or path.suffix.lower() not in FORMATS or path.name.startswith(("_", ".")):
                continue
            parts = path.relative_to(root).parts
            if kind in FLAT_KINDS:
                if FORMATS[path.suffix.lower()] in FLAT_KINDS[kind]:
                    entity = parts[0] if len(parts) > 1 else FLAT_ENTITY
                    found.append(LandedFile(kind, entity, path, path.relative_to(landing_dir).as_posix()))
            elif len(parts) > 1:
                found.append(LandedFile(kind, parts[0], path, path.relative_to(landing_dir).as_posix()))
    return found


def raw_table(raw_schema: str) -> str:
    return f"{raw_schema}.{RAW_TABLE}"


def ensure_raw_table(spark, raw_schema: str) -> None:
    spark.sql(f"create schema if not exists {raw_schema}")
    spark.sql(
        f"""create table if not exists {raw_table(raw_schema)} (
            row_values map<string, string>,
            raw_text string,
            _source_file string,
            _batch_id string,
            _ingested_at timestamp,
            landing_kind string,
            entity string
        ) using parquet partitioned by (landing_kind, entity)"""
    )


def already_landed(spark, raw_schema: str) -> set[str]:
    rows = spark.sql(f"select distinct _source_file from {raw_table(raw_schema)}").collect()
    return {r[0] for r in rows}


def _read(spark, files: list[LandedFile]):
    """A DataFrame (row_values, raw_text, _path) of the records of same-format files."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import BinaryType

    paths = [str(f.path) for f in files]
    fmt = files[0].fmt
    if fmt == "json":
        df = spark.read.text(paths).where(F.trim("value") != "")
        return df.select(
            F.from_json("value", "map<string,string>").alias("row_values"),
            F.col("value").alias("raw_text"),
            F.col("_metadata.file_path").alias("_path"),
        )
    if fmt == "csv":
        df = spark.read.option("header", True).option("inferSchema", False).csv(paths)
    else:
        df = spark.read.option("mergeSchema", True).parquet(*paths)
    pairs = []
    for field in df.schema.fields:
        value = F.col(f"`{field.name}`")
        if isinstance(field.dataType, BinaryType):
            text = F.when(value.isNotNull(), F.concat(F.lit("0x"), F.hex(value)))
        else:
            text = value.cast("string")
        pairs += [F.lit(field.name.lower()), text]
    return df.select(
        F.create_map(*pairs).alias("row_values"),
        F.lit(None).cast("string").alias("raw_text"),
        F.col("_metadata.file_path").alias("_path"),
    )


def land(spark, landing_dir: Path, raw_schema: str, batch_id: str) -> dict[tuple[str, str], int]:
    """Lands every new file; returns the number of records landed per (kind, entity)."""
    from pyspark.sql import functions as F

    ensure_raw_table(spark, raw_schema)
    seen = already_landed(spark, raw_schema)
    new = [f for f in discover(landing_dir) if f.relative not in seen]
    groups: dict[tuple[str, str, str], list[LandedFile]] = defaultdict(list)
    for f in new:
        groups[(f.kind, f.entity, f.fmt)].append(f)
    counts: dict[tuple[str, str], int] = defaultdict(int)
    frames = []
    for (kind, entity, _fmt), files in groups.items():
        relative_by_path = {str(f.path.resolve()): f.relative for f in files}
        mapping = F.create_map(*[F.lit(x) for pair in relative_by_path.items() for x in pair])
        local_path = F.regexp_replace(F.url_decode("_path"), "^file:(//)?", "")
        frames.append(
            _read(spark, files).select(
                "row_values",
                "raw_text",
                F.coalesce(mapping[local_path], local_path).alias("_source_file"),
                F.lit(batch_id).alias("_batch_id"),
                F.current_timestamp().alias("_ingested_at"),
                F.lit(kind).alias("landing_kind"),
                F.lit(entity).alias("entity"),
            )
        )
    if not frames:
        return {}
    combined = frames[0]
    for frame in frames[1:]:
        combined = combined.unionByName(frame)
    # One write (one job commit) for the whole batch, so a killed run leaves no half-landed
    # batch in practice; a file is recorded as landed only by its rows being there.
    combined.write.insertInto(raw_table(raw_schema))
    for row in (
        spark.table(raw_table(raw_schema))
        .where(F.col("_batch_id") == batch_id)
        .groupBy("landing_kind", "entity")
        .count()
        .collect()
    ):
        counts[(row["landing_kind"], row["entity"])] = row["count"]
    return dict(counts)
