"""Lands files from the landing folder into the one raw table, `<raw schema>.landed_rows`.

Landing contract (docs/landing.md "Landing"): `change_tables/<capture_instance>/` and
`cdc_metadata/{lsn_time_mapping,change_tables,captured_columns}/`, files in any sub-folder, as
Parquet (`.parquet`), CSV with a header (`.csv`) or JSON lines (`.json`, `.jsonl`); and `ces/`
(optionally `ces/<event hub or topic>/`), CloudEvents as JSON lines; `debezium/` (optionally
`debezium/<topic>/`), Debezium change events as JSON lines.
Python discovers the files and decides which land (intake); the dbt macro `land_files` reads and
inserts them in SQL, on the target's Spark (embedded session or cluster), so the landing folder must be readable there at
the same absolute path. The landing folder is a local path or a URI of any file system Hadoop
reads (`hdfs://`, `s3a://`, `abfss://`, `gs://`): runner/sources/folders.py lists it and reads the few
bytes the checks below need.
Every record becomes a map of lower-cased column names to text (binary as `0x` hex; nested JSON
as its JSON text) plus the file it came from and the batch id; JSON lines also keep their text,
so a line that is not a JSON object reaches quarantine as it was. A file is identified by its
path relative to the landing folder, its size and its modification time: one already landed is
never landed again, so re-running over the same files adds nothing twice, and one whose path
was landed with another size or time is refused alone (exports are immutable); one that changes
between the runner's two listings is still being written and waits (files_to_land). Each batch
is one Delta commit, so a killed landing leaves every file landed whole or not at all.

CSV (docs/landing.md "CSV"): RFC 4180 by default (quote `"`, a quote inside a value doubled,
line breaks inside quoted values, UTF-8 with or without a byte-order mark, UTF-16 with one),
the form bcp, SSIS, Azure Data Factory and Python's csv module write; each record ends with the
line separator the header row ends with (CRLF or LF), which keeps a CRLF inside a value as it was.
A folder may declare another dialect in the var cdc_csv_dialects.

Export manifests (docs/landing.md "Export manifests"): a `*.manifest.json` file in a capture instance's
folder lists one export's files with their row counts and the LSN range it covers. Python reads
and checks them here (structure, listed files present, sizes, and the listed files' rows and the
LSNs: a Parquet file's rows from its footer, the others' and the LSNs read in SQL by the macro
probe_files before anything lands); the macro land_files lands each manifest, as one raw row of landing kind
`manifest`, in the same commit as its files, only when all of them are whole. Once a folder has a
manifest, its files that no manifest lists wait. Files that are cut short (a Parquet file without
its footer, or with one that does not parse, a CSV whose last row has no line break) are refused: they land nothing, and the
table they feed waits for a whole copy (runner/run/plan.py). An export of a declared capture instance
without one of its declared columns is refused too (check_probed).
"""

from __future__ import annotations

import csv
import io
import json
import posixpath
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import ValidationError

from runner.errors import UsageError
from runner.project.config import (
    DATABASES_FOLDER,
    Database,
    ExportManifest,
    SnapshotManifest,
    declared_databases,
    explain,
    project_vars,
)
from runner.project.tables import exported_columns
from runner.run.layout import open_warehouse
from runner.run.plan import dbkey
from runner.sources.folders import Folder, open_folder

KINDS = ("change_tables", "cdc_metadata", "ces", "debezium", "snapshots")
# the kinds a database other than the default one lands in databases/<database>/ (its events, as
# every database's, land in ces/ and debezium/, routed by the database they name)
DATABASE_KINDS = ("change_tables", "cdc_metadata", "snapshots")
FORMATS = {".parquet": "parquet", ".csv": "csv", ".json": "json", ".jsonl": "json"}
# CES and Debezium events are routed by their own db.schema.table (Debezium: or by topic, the
# sub-folder), so files may sit directly in ces/ or debezium/ too.
FLAT_KINDS = {"ces": ("json",), "debezium": ("json",)}
FLAT_ENTITY = "default"
RAW_TABLE = "landed_rows"
MANIFEST_SUFFIX = ".manifest.json"
# the folders whose exports come with manifests, and the landing kind of their manifests: an
# export of a capture instance's changes, a snapshot of a tracked table (which always needs one)
MANIFEST_KINDS = {"change_tables": "manifest", "snapshots": "snapshot_manifest"}
FOLDER_OF_MANIFEST = {v: k for k, v in MANIFEST_KINDS.items()}
PARQUET_MAGIC = b"PAR1"
# RFC 4180: what every CSV file is read with unless its folder declares otherwise (the var
# cdc_csv_dialects); Spark's own defaults (escape `\`, one line per record) shift or split values
CSV_DIALECT = {"sep": ",", "quote": '"', "escape": '"', "encoding": "UTF-8", "nullValue": ""}
CSV_SETTABLE = (*CSV_DIALECT, "comment")
BOMS = ((b"\xef\xbb\xbf", "UTF-8"), (b"\xff\xfe", "UTF-16"), (b"\xfe\xff", "UTF-16"))


Landing = Path | str | Folder  # a landing folder: runner/sources/folders.py open_folder


@dataclass(frozen=True)
class LandedFile:
    kind: str
    entity: str
    relative: str  # its path under the landing folder
    size: int
    modified_ns: int
    database: str = ""  # the database folder it sits in (databases/<database>/), '' at the top level

    @property
    def fmt(self) -> str:
        return "manifest" if self.kind in FOLDER_OF_MANIFEST else FORMATS[_suffix(self.relative)]


def _suffix(relative: str) -> str:
    return posixpath.splitext(relative)[1].lower()


def discover(landing: Landing) -> list[LandedFile]:
    """All landable files under the landing folder, in a stable order: the default database's
    and the events at its top level, every other database's exports in `databases/<database>/`
    (change_tables, cdc_metadata, snapshots: docs/landing.md "Several databases"); export
    manifests (in change_tables/<capture_instance>/) come as kind `manifest`. What is not data
    (hidden) is skipped: see hidden."""
    folder = open_folder(landing)
    if not folder.exists():
        raise UsageError(f"landing folder {folder} does not exist; pass --landing DIR (a local folder or a URI)")
    found = []
    for kind in KINDS:
        for listed in folder.files(kind):
            found += _landable(listed, kind, tuple(listed.relative.split("/")[1:]), "")
    for listed in folder.files(DATABASES_FOLDER):
        parts = listed.relative.split("/")  # databases/<database>/<kind>/...
        if len(parts) > 3 and parts[2] in DATABASE_KINDS and not parts[1].startswith((".", "_")):
            found += _landable(listed, parts[2], tuple(parts[3:]), parts[1])
    return found


def _landable(listed, kind: str, parts: tuple[str, ...], database: str) -> list[LandedFile]:
    """A listed file as the landable file it is (parts: its path below its kind's folder), or none."""
    if _suffix(listed.relative) not in FORMATS or hidden(parts):
        return []
    stamp = (listed.relative, listed.size, listed.modified_ns)
    if kind in MANIFEST_KINDS and parts[-1].lower().endswith(MANIFEST_SUFFIX):
        return [LandedFile(MANIFEST_KINDS[kind], parts[0], *stamp, database)] if len(parts) > 1 else []
    if kind in FLAT_KINDS:
        if FORMATS[_suffix(listed.relative)] in FLAT_KINDS[kind]:
            return [LandedFile(kind, parts[0] if len(parts) > 1 else FLAT_ENTITY, *stamp, database)]
        return []
    return [LandedFile(kind, parts[0], *stamp, database)] if len(parts) > 1 else []


def hidden(parts: tuple[str, ...]) -> bool:
    """Whether a file (its path below its kind's folder, as parts) is not data, as Hadoop's and
    Spark's readers hide it: a file whose name starts with `_` or `.` (`_SUCCESS`, `.crc`
    checksums, a writer's `.part-0.inprogress`), anything below a folder whose name starts with
    `.` (`.spark-staging-*`, `.hive-staging*`), and below the first folder, one whose name starts
    with `_` (a writer's `_temporary/` attempts under a topic or capture instance). The first
    folder is a topic, capture instance, table or metadata entity, whose name may start with `_`
    (Kafka allows `_orders`): it is data unless it is `_temporary`, the folder Hadoop's committer
    writes uncommitted attempts to, as a Spark writer leaves it in a flat `ces/` or `debezium/`."""
    *folders, name = parts
    return (name.startswith(("_", ".")) or any(f.startswith(".") for f in folders)
            or any(f.startswith("_") for f in folders[1:]) or folders[:1] == ["_temporary"])


def raw_table(raw_schema: str) -> str:
    return f"{raw_schema}.{RAW_TABLE}"


def listing(landing: Landing) -> dict[str, tuple[int, int]]:
    """Each landable file's (size, modification time in ns), by its path under the landing folder:
    the runner's first listing, which files_to_land compares its own with (see `settled`)."""
    return {f.relative: (f.size, f.modified_ns) for f in discover(landing)}


UNSETTLED = ("still being written: its size or modification time changed (or it appeared) between the run's two "
             "listings of the landing folder; it lands with a run that finds it unchanged (an export manifest listing "
             "it lands it at once)")
# Why a file waits (an entry's `wait`), as the run reports it once per folder (runner/run/report.py
# waiting_lines): what the files are, and the remedy.
WAITS = {
    "unsettled": ("still being written (they changed between the run's two listings of the landing folder)",
                  "nothing to do: each lands with the next run that finds it unchanged"),
    "unlisted": ("that no export manifest lists, in a folder that holds export manifests",
                 ("once a capture instance's folder holds a manifest, only the files a manifest lists land: land the "
                 "manifest of the export they belong to (written after its files), or move them out of the folder if "
                 "they belong to none (docs/landing.md \"Export manifests\")")),
    "incomplete": ("of an export whose manifest lists files that are not in the landing folder yet",
                   ("copy the missing files the manifest names into the folder (an exporter writes the manifest last); "
                   "the export lands whole with the next run")),
    "snapshot_manifest": ("of a snapshot without its manifest",
                          ("write the snapshot's manifest (snapshot_lsn and each file's rows) into the same folder, "
                          "after its files (docs/landing.md \"Snapshots\")")),
}


def files_to_land(landing: Landing, csv_dialects: dict[str, dict[str, str]] | None = None,
                  exported_columns: dict[str, list[str]] | None = None,
                  settled: dict[str, tuple[int, int]] | None = None,
                  databases: dict[str, Database] | None = None) -> list[dict[str, object]]:
    """The landing folder's files as `intake` takes them (it skips those landed):
    each {kind, entity, path, relative, format, size, modified_ms}, a CSV file with `csv`
    (see csv_options), plus `refused` (why the file must not land) or `waiting`
    (why it cannot land yet); a manifest also carries its parsed fields (see _read_manifest)
    with `files` (the listed files' relative paths) and `rows_by_file`. intake acts on these
    only for files not landed yet. csv_dialects: the var cdc_csv_dialects (see csv_dialects).
    exported_columns (runner/project/tables.py exported_columns): a CSV or Parquet export of a declared
    capture instance carries `expected_columns`, which check_probed checks its columns against.
    settled: an earlier listing (see `listing`, the runner takes it before Spark starts); a file
    that is not in it, or whose size or time differs, is still being written: it waits (`unsettled`)
    unless a manifest lists it, since a copy landed half-written would be refused as changed for good.
    databases: the declared databases (runner/project/config.py declared_databases): a file of a
    database folder not declared, or at the top level when they declare no default database, is
    refused (where_refused)."""
    folder = open_folder(landing)
    found = discover(folder)
    entries = {}
    for f in found:
        entry = entries[f.relative] = {"kind": f.kind, "entity": f.entity, "path": folder.spark_path(f.relative),
                                       "relative": f.relative, "format": f.fmt, "size": f.size,
                                       "modified_ms": f.modified_ns // 1_000_000, "modified_ns": f.modified_ns,
                                       "database": f.database or None}
        owner = dbkey(f.database, f"{FOLDER_OF_MANIFEST.get(f.kind, f.kind)}/{f.entity}".lower())
        if f.fmt in ("csv", "parquet") and owner in (exported_columns or {}):
            entry["expected_columns"] = exported_columns[owner]
        if reason := where_refused(f, databases or {}):
            entry["refused"] = reason
            continue
        if ":" in f.relative:
            entry["refused"] = ("its path holds ':', which Spark's (Hadoop's) file paths cannot read; rename it without "
                                "':' (e.g. '-' instead), and it lands with the next run")
            continue
        if f.fmt != "manifest" and (reason := cut_short(folder, f.relative, f.fmt, f.size,
                                                                _dialect_of(f.relative, csv_dialects or {}))):
            entry["refused"] = reason
        elif f.fmt == "csv":
            try:
                entry["csv"] = csv_options(folder.read(f.relative, 0, 1 << 20), _dialect_of(f.relative, csv_dialects or {}))
            except CsvHeaderError as exc:
                entry["refused"] = str(exc)
    # a capture instance's folder once it has a manifest; every snapshot folder
    managed = {(f.database, FOLDER_OF_MANIFEST[f.kind], f.entity) for f in found if f.kind in FOLDER_OF_MANIFEST}
    listed: dict[str, str] = {}
    for f in found:
        if f.kind in FOLDER_OF_MANIFEST:
            _apply_manifest(folder, entries[f.relative], entries, listed)
    for f in found:
        entry = entries[f.relative]
        if f.relative in listed or "refused" in entry:
            continue
        if settled is not None and settled.get(f.relative) != (entry["size"], entry["modified_ns"]):
            entry["waiting"], entry["unsettled"], entry["wait"] = UNSETTLED, True, "unsettled"
            continue
        if f.kind == "snapshots":
            entry["waiting"] = "a snapshot lands only with its manifest (snapshot_lsn and the files' row counts)"
            entry["wait"] = "snapshot_manifest"
        elif f.kind == "change_tables" and (f.database, f.kind, f.entity) in managed:
            entry["waiting"], entry["wait"] = "no export manifest lists it yet", "unlisted"
    return list(entries.values())


def where_refused(f: LandedFile, databases: dict[str, Database]) -> str | None:
    """Why a file may not land where it sits: in the folder of a database var cdc_databases does
    not declare, or, once it declares databases, at the top level (the default database's) when
    none is marked default. Events (ces/, debezium/) land at the top level whatever their database."""
    if f.database and f.database not in databases:
        return (f"it is in the folder of database {f.database}, which var cdc_databases does not declare (declared: "
                f"{', '.join(sorted(databases)) or 'none'}): declare it there (docs/tables.md \"Several databases\"), or move "
                "its exports out of databases/; they land with the next run")
    if not f.database and f.kind not in FLAT_KINDS and databases and not any(not d.id for d in databases.values()):
        return (f"the landing folder's top level holds the default database's exports, and var cdc_databases declares no "
                f"default one (declared: {', '.join(sorted(databases))}): move it to {DATABASES_FOLDER}/<database>/, or mark "
                "its database default: true (docs/landing.md \"Several databases\"); it lands with the next run")
    return None


def csv_dialects(project_dir: Path) -> dict[str, dict[str, str]]:
    """The var cdc_csv_dialects of the project's dbt_project.yml, checked: a mapping of a folder
    of the landing folder (e.g. `change_tables/dbo_orders`, or `snapshots` for all snapshots) to
    the CSV options its files are read with instead of RFC 4180's (see CSV_SETTABLE)."""
    declared = project_vars(project_dir).get("cdc_csv_dialects")
    if declared is None:
        return {}
    if not isinstance(declared, dict):
        raise UsageError("var cdc_csv_dialects must map a folder of the landing folder to its CSV options, "
                         "e.g. {change_tables/dbo_orders: {sep: ';'}}")
    dialects = {}
    for folder, options in declared.items():
        unknown = sorted(set(options or {}) - set(CSV_SETTABLE)) if isinstance(options, dict) else ["(not a mapping)"]
        if unknown:
            raise UsageError(f"cdc_csv_dialects: folder {folder} sets {', '.join(map(str, unknown))}; a folder's CSV "
                             f"dialect may set {', '.join(CSV_SETTABLE)}")
        bad = [k for k, v in options.items() if not isinstance(v, str) or (k != "nullValue" and not v)]
        parts = str(folder).strip("/").split("/")
        kind = parts[2] if parts[0] == DATABASES_FOLDER and len(parts) > 2 else parts[0]
        if bad or kind not in (DATABASE_KINDS if parts[0] == DATABASES_FOLDER else KINDS):
            raise UsageError(f"cdc_csv_dialects: folder {folder} must be under one of {', '.join(KINDS)} (or "
                             f"{DATABASES_FOLDER}/<database>/ and one of {', '.join(DATABASE_KINDS)}) and set each option to "
                             f"text; got {options!r}")
        dialects[str(folder).strip("/")] = dict(options)
    return dialects


def _dialect_of(relative: str, dialects: dict[str, dict[str, str]]) -> dict[str, str]:
    """RFC 4180 overlaid by the dialect of the deepest declared folder holding the file."""
    owners = [f for f in dialects if relative.startswith(f + "/")]
    return {**CSV_DIALECT, **(dialects[max(owners, key=len)] if owners else {})}


def csv_options(head: bytes, dialect: dict[str, str]) -> dict[str, object]:
    """How Spark reads one CSV file, from its first MiB (`head`): `options` (its dialect, the encoding its byte-order mark
    names, if it has one, and the record separator its header row ends with, `\r\n` or `\n`, so
    a line break inside a quoted value keeps its form: Spark rewrites a CRLF inside quotes to LF
    when it detects the separator itself) and `header`, the header row's column names parsed
    here, given to Spark as the file's schema (Spark's own header inference of a multi-line CSV
    re-reads the path as a glob, so a name with `[` or `{` would match nothing). Raises
    CsvHeaderError when the header row cannot name the file's columns."""
    encoding = next((name for bom, name in BOMS if head.startswith(bom)), dialect["encoding"])
    try:
        text = head.decode(encoding, errors="replace")
    except LookupError:  # an encoding Spark (Java) knows and Python does not: its line feeds are ASCII's
        text = head.decode("latin-1")
    text = text.removeprefix("\ufeff")
    end = text.find("\n")
    if end < 0:
        raise CsvHeaderError("no header row: the first MiB holds no line break")
    line_sep = "\r\n" if end > 0 and text[end - 1] == "\r" else "\n"
    quote, escape = dialect["quote"], dialect["escape"]
    reader = csv.reader(io.StringIO(text[:end + 1], newline=""), delimiter=dialect["sep"], quotechar=quote,
                        doublequote=escape == quote, escapechar=None if escape == quote else escape, strict=False)
    header = [name.strip() or f"_c{i}" for i, name in enumerate(next(reader, []))]
    seen: dict[str, str] = {}
    for name in header:
        if name.lower() in seen:
            raise CsvHeaderError(f"its header row names the column {name} twice ({seen[name.lower()]}, {name}); "
                                 "each column lands under its lower-cased name")
        seen[name.lower()] = name
    return {"options": {**dialect, "encoding": encoding, "lineSep": line_sep}, "header": header}


class CsvHeaderError(Exception):
    """Why a CSV file's header row cannot name its columns (the file is refused with it)."""


def cut_short(folder: Folder, relative: str, fmt: str, size: int,
              csv: dict[str, str] | None = None) -> str | None:
    """Why a data file is incomplete, or None: a Parquet file must begin and end with its magic
    (the footer is written last), a CSV must end with a line break (an export cut mid-row yields
    NULLs or cut values that still cast) in its encoding (csv: its dialect)."""
    if fmt == "parquet":
        head = folder.read(relative, 0, 4)
        tail = folder.read(relative, max(size - 8, 0), 8)
        footer = int.from_bytes(tail[:4], "little") if len(tail) == 8 else 0
        if size < 12 or head != PARQUET_MAGIC or tail[4:] != PARQUET_MAGIC or footer + 12 > size:
            return (f"not a whole Parquet file ({size} bytes, no PAR1 footer at its end): it was cut short "
                    f"or is still being written. {REPLACE}")
    elif fmt == "csv":
        if size == 0:
            return f"empty CSV file (not even a header row): it was cut short or is still being written. {REPLACE}"
        newline = _newline(folder.read(relative, 0, 3), (csv or CSV_DIALECT)["encoding"])
        if folder.read(relative, max(size - len(newline), 0), len(newline)) != newline:
                return ("the CSV does not end with a line break, so its last row was cut short (or the file is still "
                        f"being written); exports end every row, including the last, with a line break. {REPLACE}")
    return None


def _newline(head: bytes, encoding: str) -> bytes:
    """A line feed in the file's encoding (UTF-16 by its byte-order mark, in `head`)."""
    encoding = next((name for bom, name in BOMS if head.startswith(bom)), encoding)
    if encoding.upper().replace("-", "") == "UTF16":
        return b"\0\n" if head.startswith(b"\xfe\xff") else b"\n\0"
    try:
        return "\n".encode(encoding)
    except LookupError:
        return b"\n"


def _apply_manifest(folder: Folder, manifest: dict, entries: dict[str, dict], listed: dict[str, str]) -> None:
    """Reads a manifest into its entry and marks the files it lists: each gets the manifest and
    its row count; a problem with any of them refuses (or holds back) the manifest and all its
    files, so an export lands whole or not at all."""
    root = dbkey(manifest.get("database") or "", f"{FOLDER_OF_MANIFEST[manifest['kind']]}/{manifest['entity']}")
    try:
        fields = _read_manifest(folder.read(manifest["relative"]), manifest["kind"], manifest["entity"])
    except ManifestError as exc:
        manifest["refused"] = f"export manifest: {exc}"
        return
    manifest.update(fields)
    files = []
    for item in fields["files"]:
        relative = posixpath.normpath(posixpath.join(posixpath.dirname(manifest["relative"]), item["path"]))
        if not relative.startswith(root + "/") or posixpath.isabs(item["path"]):
            manifest["refused"] = f"export manifest: file {item['path']} is outside {root}/"
            return
        if relative in listed:
            manifest["refused"] = f"export manifest: file {item['path']} is also listed by {listed[relative]}"
            return
        files.append((relative, item))
    for relative, item in files:
        listed[relative] = manifest["relative"]
        entry = entries.get(relative)
        if entry is not None and entry["format"] == "manifest":
            manifest["refused"] = f"export manifest: it lists {item['path']}, another manifest"
            return
        if entry is None:
            manifest.setdefault("waiting", f"lists {item['path']}, which is not in the landing folder yet")
            manifest["wait"] = "incomplete"
            continue
        if item.get("bytes") is not None and item["bytes"] != entry["size"]:
            entry.setdefault("refused", f"{entry['size']} bytes, but its export manifest says {item['bytes']}: it was cut short")
        if "refused" in entry and "refused" not in manifest:
            manifest.update(refused=f"its file {item['path']} is refused: {entry['refused']}", refused_for=relative)
    manifest["files"] = [relative for relative, _ in files]
    manifest["rows_by_file"] = {relative: item["rows"] for relative, item in files}
    for relative, _ in files:
        if relative in entries:
            if "refused" in manifest:
                if "refused" not in entries[relative]:
                    entries[relative].update(refused=f"its export manifest {manifest['relative']} is refused: "
                                                     f"{manifest['refused']}", refused_for=manifest["relative"])
            elif "waiting" in manifest:
                entries[relative]["waiting"] = f"its export manifest {manifest['relative']} {manifest['waiting']}"
                entries[relative]["wait"] = "incomplete"


class ManifestError(Exception):
    """What is wrong with an export manifest (it is refused with this reason)."""


def _read_manifest(content: bytes, kind: str, entity: str) -> dict[str, object]:
    """The fields of a manifest, checked. An export of changes (kind `manifest`, docs/landing.md "Export
    manifests"): capture_instance (its folder's), through_lsn (inclusive), after_lsn (exclusive,
    optional: the previous export's through_lsn). A snapshot (kind `snapshot_manifest`, docs/landing.md
    "Snapshots"): table (its folder's), snapshot_lsn (the LSN it is consistent at). Both: files
    [{path (relative to the manifest), rows, bytes (optional)}]. The LSNs, in `lsns`, are checked
    by check_probed (they parse in SQL, like every other LSN: macro probe_files). Raises ManifestError."""
    model, owner, lsn_fields = (ExportManifest, "capture_instance", ("through_lsn", "after_lsn")) if kind == "manifest" \
        else (SnapshotManifest, "table", ("snapshot_lsn",))
    try:
        doc = json.loads(content.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ManifestError(f"not a JSON document ({exc})") from None
    if not isinstance(doc, dict):
        raise ManifestError("not a JSON object")
    try:
        manifest = model.model_validate(doc)
    except ValidationError as exc:
        raise ManifestError(f"{explain(exc)}; this manifest has {owner}, {', '.join(lsn_fields)} and files "
                            "[{path, rows, bytes (optional)}]") from None
    if getattr(manifest, owner).lower() != entity.lower():
        raise ManifestError(f"{owner} is {getattr(manifest, owner)!r}, but the manifest is in the folder of {entity}")
    return {"owner": owner, "lsns": {f: getattr(manifest, f) for f in lsn_fields},
            "files": [f.model_dump() for f in manifest.files], "text": json.dumps(doc, sort_keys=True)}


# why a landed file that changed is refused (screen)
CHANGED = ("changed since it was landed (landed: {0} bytes modified at {1} ms; now: {2} bytes modified at {3} ms): it "
           "was landed while still being written, or replaced. Exports are immutable: put the whole file under a new "
           "name (with a new manifest if one lists it); it lands whole and the rows landed from the first copy are taken "
           "once. Then remove this one")
# the remedy of a file refused as incomplete: it never landed, so its name is free
REPLACE = "Replace it with a whole copy under the same name; it lands with the next run"
# why a file is refused for another's sake (check_probed, recorded in Intake.for_another): a
# manifest for a file it lists, a file for its manifest
REFUSED_FILE = "export manifest: its file {0} is refused"
REFUSED_MANIFEST = "its export manifest {0} is refused: {1}"
# SQL Server's metadata columns an export may carry besides the captured ones (check_probed)
METADATA_COLUMNS = ("__$start_lsn", "__$end_lsn", "__$seqval", "__$operation", "__$update_mask", "__$command_id")


@dataclass
class Intake:
    """What of the landing folder lands in a run (intake): `accepted`, the entries to land (the
    macro land_files takes them; a CSV or Parquet file with its `columns` [[name, type]]);
    `refused`, file -> why it must not land; `for_another`, file -> the file it is refused for
    (a manifest for a file it lists, a file for its manifest: runner/run/plan.py names the file
    refused for its own reason first); `waiting`, [{file, reason, wait}] (see WAITS); `ignored`,
    "<file>: ..." per export with columns not declared for its capture instance."""
    accepted: list[dict] = field(default_factory=list)
    refused: dict[str, str] = field(default_factory=dict)
    for_another: dict[str, str] = field(default_factory=dict)
    waiting: list[dict] = field(default_factory=list)
    ignored: list[str] = field(default_factory=list)

    def facts(self) -> dict[str, object]:
        """The run's facts about its landing (runner/run/plan.py Facts refused, waiting, ignored)."""
        return {"refused": [f"{file}: {reason}" for file, reason in sorted(self.refused.items())],
                "refused_for_another": sorted(self.for_another),
                "waiting": sorted(self.waiting, key=lambda w: w["file"]), "ignored": sorted(self.ignored)}


def screen(files: list[dict], landed: dict[str, list[int]]) -> Intake:
    """files_to_land's entries against the landed files (relative -> [size, modified_ms], the
    macro open_run's `landed`): a file landed with the same size and time is skipped, one landed
    with another is refused (CHANGED); the others are refused, wait or are accepted as
    files_to_land marked them."""
    intake = Intake()
    for f in files:
        relative, seen = f["relative"], landed.get(f["relative"])
        if seen is not None:
            if list(seen) != [f["size"], f["modified_ms"]]:
                intake.refused[relative] = CHANGED.format(seen[0], seen[1], f["size"], f["modified_ms"])
        elif f.get("refused"):
            intake.refused[relative] = f["refused"]
            if f.get("refused_for"):
                intake.for_another[relative] = f["refused_for"]
        elif f.get("waiting"):
            intake.waiting.append({"file": relative, "reason": f["waiting"], "wait": f.get("wait", "")})
        else:
            intake.accepted.append(f)
    return intake


def probe_request(intake: Intake, landed: dict[str, list[int]]) -> dict[str, object] | None:
    """What the macro probe_files must read before the accepted files can be checked (check_probed),
    or None when nothing: the records of each new CSV or JSON file an accepted manifest lists
    (a Parquet file's are in its footer) and of each it lists that landed earlier (`count_landed`),
    and the canonical form of the manifests' LSNs."""
    manifests = [f for f in intake.accepted if f["format"] == "manifest"]
    listed = {relative for m in manifests for relative in m["files"]}
    files = [{**f, "count": True} for f in intake.accepted if f["format"] in ("csv", "json") and f["relative"] in listed]
    earlier = sorted(relative for relative in listed if relative in landed)
    lsns = sorted({value for m in manifests for value in m["lsns"].values() if value is not None})
    return {"files": files, "count_landed": earlier, "lsns": lsns} if files or earlier or lsns else None


def check_probed(intake: Intake, probed: dict[str, dict]) -> None:
    """Refuses what the probe shows wrong (docs/landing.md "Export manifests", "Change tables") and
    gives each accepted CSV or Parquet file its `columns`; the refused leave `accepted`.
    - An export of a declared capture instance (`expected_columns`) must carry each declared
      column: a renamed or dropped one would land as NULL in every change. Columns neither
      declared nor SQL Server's metadata are noted in `ignored`.
    - A manifest's LSNs must parse (probed `lsns`, canonical from here on), after_lsn must not be
      above through_lsn, no file it lists may be refused, and each must have the rows it says
      (probed `rows`); otherwise the manifest and every file it lists are refused."""
    refused = intake.refused
    for f in intake.accepted:
        if f["format"] == "csv":
            f["columns"] = [[name, "string"] for name in f["csv"]["header"]]
        elif f["format"] == "parquet":
            f["columns"] = probed["columns"][f["relative"]]
        if f.get("expected_columns") is None or "columns" not in f:
            continue
        names = [c[0].lower() for c in f["columns"]]
        missing = [c for c in f["expected_columns"] if c not in names]
        extra = [c for c in names if c not in f["expected_columns"] and c not in METADATA_COLUMNS]
        if missing:
            refused[f["relative"]] = (
                f"its columns lack {', '.join(missing)}, declared for capture instance {f['entity']} (it has "
                f"{', '.join(names)}): a column renamed or dropped in the export would land as NULL. Re-export with the "
                "declared columns; if the table changed, SQL Server keeps the old capture instance as it was: declare the "
                "new one (docs/tables.md \"Capture-instance changes\")")
        elif extra:
            intake.ignored.append(f"{f['relative']}: column(s) {', '.join(extra)} not declared for capture instance "
                                  f"{f['entity']}, not applied")
    manifests = [f for f in intake.accepted if f["format"] == "manifest"]
    for m in manifests:
        canonical = {name: probed["lsns"].get(value) if value is not None else None for name, value in m["lsns"].items()}
        bad = [name for name in sorted(m["lsns"]) if m["lsns"][name] is not None and canonical[name] is None]
        if bad:
            refused[m["relative"]] = f"export manifest: {bad[0]} {m['lsns'][bad[0]]} is not an LSN"
        elif canonical.get("after_lsn") and canonical["after_lsn"] > canonical["through_lsn"]:
            refused[m["relative"]] = (f"export manifest: after_lsn {m['lsns']['after_lsn']} is above through_lsn "
                                      f"{m['lsns']['through_lsn']}")
        m["lsns"] = canonical
    for m in manifests:
        for relative in m["files"]:
            found, expected = probed["rows"].get(relative, 0), m["rows_by_file"][relative]
            if relative not in refused and found != expected:
                refused[relative] = (f"{found} rows, but its export manifest {m['relative']} says {expected}: it was cut "
                                     f"short or is not the exported file. {REPLACE}")
            if relative in refused and m["relative"] not in refused:
                refused[m["relative"]] = REFUSED_FILE.format(relative)
                intake.for_another[m["relative"]] = relative
        if m["relative"] in refused:
            for relative in m["files"]:
                if relative not in refused and any(f["relative"] == relative for f in intake.accepted):
                    refused[relative] = REFUSED_MANIFEST.format(m["relative"], refused[m["relative"]])
                    intake.for_another[relative] = m["relative"]
    intake.accepted = [f for f in intake.accepted if f["relative"] not in refused]


def intake(dbt, folder: Folder, files: list[dict], landed: dict[str, list[int]], raw_schema: str) -> Intake:
    """What of `files` (files_to_land of `folder`) lands: screened against the landed files, each
    new Parquet file's footer read here (parquet_footer: its columns and rows; one that does not
    parse is refused), what else the checks need probed in SQL (macro probe_files, one dbt
    invocation, only for a manifest's CSV or JSON files, its files landed earlier or its LSNs) and
    checked (check_probed)."""
    screened = screen(files, landed)
    probed = {"columns": {}, "rows": {}, "lsns": {}}
    for f in [f for f in screened.accepted if f["format"] == "parquet"]:
        try:
            probed["columns"][f["relative"]], probed["rows"][f["relative"]] = parquet_footer(folder, f["relative"], f["size"])
        except ParquetFooterError as exc:
            screened.refused[f["relative"]] = str(exc)
    screened.accepted = [f for f in screened.accepted if f["relative"] not in screened.refused]
    request = probe_request(screened, landed)
    if request is not None:
        found = dbt.operation("sqlserver_cdc.probe_files", {**request, "raw_schema": raw_schema}).get("probe_files") or {}
        probed["rows"].update(found.get("rows") or {})
        probed["lsns"].update(found.get("lsns") or {})
    check_probed(screened, probed)
    return screened


class ParquetFooterError(Exception):
    """Why a Parquet file's footer does not parse (the file is refused with it)."""


def parquet_footer(folder: Folder, relative: str, size: int) -> tuple[list[list[str]], int]:
    """A whole Parquet file's columns, [name, type] ("binary" for a byte string column, which
    lands as 0x hex, whatever the column's Arrow type otherwise), and its rows, from its footer:
    the footer's bytes only are read, through the landing folder (cut_short has checked the magic
    and the footer's length). Raises ParquetFooterError."""
    # imported here: a run with nothing new (no Parquet file to read) does not pay for it
    import pyarrow as pa
    import pyarrow.parquet as pq

    length = int.from_bytes(folder.read(relative, size - 8, 4), "little")
    tail = folder.read(relative, size - 8 - length, length + 8)
    try:
        metadata = pq.read_metadata(pa.BufferReader(PARQUET_MAGIC + tail))
        schema = metadata.schema.to_arrow_schema()
    except (pa.ArrowException, ValueError, OSError) as exc:
        raise ParquetFooterError(f"not a readable Parquet file (its footer does not parse: {' '.join(str(exc).split())}); re-export it, and it "
                                 "lands with the next run") from None
    columns = []
    for column in schema:
        kind = column.type
        while isinstance(kind, (pa.DictionaryType, pa.BaseExtensionType)):
            kind = kind.value_type if isinstance(kind, pa.DictionaryType) else kind.storage_type
        binary = pa.types.is_binary(kind) or pa.types.is_large_binary(kind) or pa.types.is_fixed_size_binary(kind)
        columns.append([column.name, "binary" if binary else str(column.type)])
    return columns, metadata.num_rows


def canonical_lsns(dbt, texts: list[str]) -> dict[str, str | None]:
    """Each LSN text in canonical form (None when it is not an LSN), read in SQL like every other
    LSN (macro probe_files)."""
    return (dbt.operation("sqlserver_cdc.probe_files", {"files": [], "lsns": list(texts)}).get("probe_files") or {}).get("lsns") or {}


def land(dbt, landing: Landing, raw_schema: str, batch_id: str) -> dict[str, object]:
    """Lands every new file through dbt (macro land_files, so the SQL runs wherever the target's
    Spark is: the embedded session or a cluster); returns the intake's facts (refused, waiting,
    ignored), `landed` (files) and `counts`, the records landed per (kind, entity). A run lands
    through begin_run instead, which also plans the run from what landed."""
    folder = open_folder(landing)
    files = files_to_land(folder, csv_dialects(dbt.project_dir), exported_columns(dbt.project_dir),
                          databases=declared_databases(dbt.project_dir))
    opened = open_warehouse(dbt, raw_schema, [f["relative"] for f in files])
    taken = intake(dbt, folder, files, opened.get("landed") or {}, raw_schema)
    outcome = dbt.operation("sqlserver_cdc.land_files", {"files": taken.accepted, "batch_id": batch_id,
                                                         "raw_schema": raw_schema,
                                                         "first_records": not opened.get("records_kept")}).get("land_files", {})
    rows = dbt.query(f"{{{{ sqlserver_cdc.landed_batch_counts('{batch_id}', '{raw_schema}') }}}}")
    return {**taken.facts(), **outcome, "counts": {(dbkey(r["source_database"] or "", r["landing_kind"]), r["entity"]):
                                                   int(r["records"]) for r in rows}}
