"""Lands files from the landing folder into the one raw table, `<raw schema>.landed_rows`.

Landing contract (README "Landing"): `change_tables/<capture_instance>/` and
`cdc_metadata/{lsn_time_mapping,change_tables,captured_columns}/`, files in any sub-folder, as
Parquet (`.parquet`), CSV with a header (`.csv`) or JSON lines (`.json`, `.jsonl`); and `ces/`
(optionally `ces/<event hub or topic>/`), CloudEvents as JSON lines; `debezium/` (optionally
`debezium/<topic>/`), Debezium change events as JSON lines.
Python only discovers the files; the dbt macro `land_files` reads and inserts them in SQL, on the
target's Spark (embedded session or cluster), so the landing folder must be readable there at
the same absolute path.
Every record becomes a map of lower-cased column names to text (binary as `0x` hex; nested JSON
as its JSON text) plus the file it came from and the batch id; JSON lines also keep their text,
so a line that is not a JSON object reaches quarantine as it was. A file is identified by its
path relative to the landing folder, its size and its modification time: one already landed is
never landed again, so re-running over the same files adds nothing twice, and one whose path
was landed with another size or time fails the run (exports are immutable). Each batch is one
Delta commit, so a killed landing leaves every file landed whole or not at all.
"""

from __future__ import annotations

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


def files_to_land(landing_dir: Path) -> list[dict[str, object]]:
    """The landing folder's files as the macro land_files takes them (it skips those landed)."""
    files = []
    for f in discover(landing_dir):
        stat = f.path.stat()
        files.append({"kind": f.kind, "entity": f.entity, "path": str(f.path.resolve()), "relative": f.relative,
                      "format": f.fmt, "size": stat.st_size, "modified_ms": stat.st_mtime_ns // 1_000_000})
    return files


def land(dbt, landing_dir: Path, raw_schema: str, batch_id: str) -> dict[tuple[str, str], int]:
    """Lands every new file through dbt (macro land_files, so the SQL runs wherever the target's
    Spark is: the embedded session or a cluster); returns the records landed per (kind, entity).
    A run lands through begin_run instead, which also writes the run ledger."""
    dbt.operation("sqlserver_cdc.land_files", {"files": files_to_land(landing_dir), "batch_id": batch_id,
                                               "raw_schema": raw_schema})
    rows = dbt.query(f"{{{{ sqlserver_cdc.landed_batch_counts('{batch_id}', '{raw_schema}') }}}}")
    return {(r["landing_kind"], r["entity"]): int(r["records"]) for r in rows}
