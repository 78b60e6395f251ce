"""`python -m runner scaffold`: the declaration, the three thin model files and the YAML docs of
each captured table, from the CDC metadata exports in the landing folder (docs/tables.md "Scaffolding").

Reads `cdc_metadata/captured_columns/` (names, ordinals, `column_type`, and the lengths,
precisions and scales of an INFORMATION_SCHEMA join when exported), `cdc_metadata/change_tables/`
(capture instance, `source_schema`, `source_table`, `index_column_list` when exported) and
`cdc_metadata/index_columns/` (the key, when `index_column_list` is not there). A declaration is
written or updated in place in dbt_project.yml (the fields scaffolding owns are replaced, any
other field the user added is kept, the rest of the file is untouched); model files and YAML
entries are written when missing. Running it again over the same metadata changes nothing.
"""

from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass, field
from pathlib import Path

import yaml
from ruamel.yaml.comments import CommentedMap, CommentedSeq
from ruamel.yaml.scalarstring import DoubleQuotedScalarString

from runner.errors import UsageError
from runner.project.config import (
    Database,
    declared_databases,
    declared_tables,
    table_databases,
    tracked_table_declarations,
)
from runner.project.tables import write_model_files
from runner.project.yaml_edit import edit_yaml, give_following_comments, take_following_comments
from runner.sources import landing
from runner.sources.folders import display, open_folder

LENGTH_TYPES = ("char", "varchar", "nchar", "nvarchar", "binary", "varbinary")
PRECISION_TYPES = ("decimal", "numeric")
FRACTION_TYPES = ("datetime2", "time", "datetimeoffset")
PLAIN_TYPES = ("int", "bigint", "smallint", "tinyint", "bit", "money", "smallmoney", "float", "real", "date",
               "datetime", "smalldatetime", "text", "ntext", "xml", "sysname", "uniqueidentifier", "image",
               "timestamp", "rowversion", *LENGTH_TYPES, *FRACTION_TYPES)
# the fields a scaffolded declaration owns; any other field of an existing declaration is kept
# (and the demo's mark: a table scaffolded over a demo table is the user's, and `init` keeps it)
OWNED = ("channel", "capture_instance", "capture_instances", "database", "databases", "source_schema", "source_table",
         "key", "columns", "demo")
METADATA = ("captured_columns", "change_tables", "index_columns")
YAML_FILES = {"staging": "models/staging/change_tables/_change_tables__models.yml",
              "marts": "models/marts/_marts__models.yml"}


@dataclass
class Captured:
    """One capture instance as its metadata describes it, in one database (`database`: its declared
    name, '' in a project that declares none), or over several (`tenants`: the pattern a tenant
    table's declaration names them by)."""

    capture_instance: str
    name: str
    source_schema: str | None = None
    source_table: str | None = None
    key: list[str] = field(default_factory=list)
    columns: list[dict] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    # a table with several capture instances: (name, captured column names in order), oldest first
    instances: list[tuple[str, list[str]]] = field(default_factory=list)
    database: str = ""
    tenants: str | None = None

    @property
    def source(self) -> str:
        """How messages name it: its capture instance, with its database's name in an estate."""
        where = f"{self.tenants} " if self.tenants else f"{self.database}:" if self.database else ""
        return f"{where}{self.capture_instance}"

    def declaration(self) -> dict:
        declared: dict = {"channel": "change_tables"}
        if self.tenants:
            declared["databases"] = [self.tenants]
        elif self.database:
            declared["database"] = self.database
        if len(self.instances) > 1:
            declared["capture_instances"] = [{"name": n, "columns": names} for n, names in self.instances]
        else:
            declared["capture_instance"] = self.capture_instance
        if self.source_schema:
            declared["source_schema"] = self.source_schema
        if self.source_table:
            declared["source_table"] = self.source_table
        columns = self.columns if len(self.instances) <= 1 else [{k: v for k, v in c.items() if k != "ordinal"}
                                                                 for c in self.columns]
        return {**declared, "key": self.key, "columns": columns}


def sql_type(row: dict) -> str | None:
    """A column's declared type from its captured_columns row: `column_type` (or `data_type`)
    with the length, precision or fraction digits SQL Server's INFORMATION_SCHEMA gives
    (character_maximum_length, -1 for max; numeric_precision, numeric_scale; datetime_precision).
    None when it cannot be declared (an unsupported type, or a decimal without its precision)."""
    t = str(row.get("column_type") or row.get("data_type") or "").strip().lower()
    base = t.split("(")[0].strip()
    if "(" in t:
        return t.replace(" ", "") if base in (*PLAIN_TYPES, *PRECISION_TYPES) else None

    def number(name: str) -> int | None:
        value = row.get(name)
        return None if value in (None, "") else int(float(value))

    if base in LENGTH_TYPES and number("character_maximum_length") is not None:
        n = number("character_maximum_length")
        return f"{base}({'max' if n == -1 else n})"
    if base in PRECISION_TYPES:
        p, s = number("numeric_precision"), number("numeric_scale")
        return None if p is None or s is None else f"{base}({p},{s})"
    if base in FRACTION_TYPES and number("datetime_precision") is not None:
        return f"{base}({number('datetime_precision')})"
    return base if base in PLAIN_TYPES else None


def read_metadata(spark, landing_dir: Path | str) -> dict[str, dict[str, list[dict]]]:
    """The rows of every landed export of captured_columns, change_tables and index_columns, per
    database folder ('' the landing folder's top level, else the database's name: docs/landing.md
    "Several databases"), keys lower-cased, files in name order (a later export of the same row wins)."""
    found: dict[str, dict[str, list[dict]]] = {}
    readers = {"csv": lambda p: spark.read.option("header", "true").csv(p), "json": spark.read.json,
               "parquet": spark.read.parquet}
    folder = open_folder(landing_dir, spark)
    for f in landing.discover(folder):
        if f.kind == "cdc_metadata" and f.entity in METADATA:
            rows = readers[f.fmt](folder.spark_path(f.relative)).collect()
            found.setdefault(f.database, {e: [] for e in METADATA})[f.entity] += [
                {k.lower(): v for k, v in r.asDict().items()} for r in rows]
    return found


def default_name(capture_instance: str, source_table: str | None) -> str:
    """The model name scaffold gives a table nobody named: its source table (or capture instance)
    in snake case (`LedgerAccounts` -> `ledger_accounts`, `HTTPLogs` -> `http_logs`)."""
    words = re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "_", source_table or capture_instance)
    return re.sub(r"_+", "_", re.sub(r"\W", "_", words)).strip("_").lower()


class Naming:
    """The model name of each captured table: the name `--name SOURCE=NAME` gives it (SOURCE: its
    capture instance, its source table, `schema.table`, or the name scaffold would choose, each
    also as `<database>:SOURCE` for one database's), else the name its existing declaration has
    (the declaration that lists its capture instance in its database: a chosen name is kept on
    re-runs), else default_name. declared: table names by (database, lower-case capture instance)
    or by capture instance alone."""

    def __init__(self, chosen: dict[str, str] | None = None, declared: dict | None = None):
        self.chosen = {k.lower(): v for k, v in (chosen or {}).items()}
        self.declared = {(k if isinstance(k, tuple) else ("", k.lower())): v for k, v in (declared or {}).items()}
        self.used: set[str] = set()
        for source, name in self.chosen.items():
            if not re.fullmatch(r"[A-Za-z][A-Za-z0-9_]*", name):
                raise UsageError(f"scaffold: --name {source}={name}: a table's name must be letters, digits and "
                                 "underscores starting with a letter (it names its models)")

    def __call__(self, capture_instance: str, row: dict, database: str = "") -> str:
        derived = default_name(capture_instance, row.get("source_table"))
        sources = [capture_instance, row.get("source_table"), f"{row.get('source_schema')}.{row.get('source_table')}",
                   derived]
        declared = self.declared.get((database, capture_instance.lower()))
        for source in (str(s).lower() for s in sources if s):
            for given in ([f"{database.lower()}:{source}"] if database else []) + [source]:
                if given in self.chosen:
                    self.used.add(given)
                    name = self.chosen[given]
                    if declared and declared != name:
                        raise UsageError(f"scaffold: capture instance {capture_instance}"
                                         f"{f' of {database}' if database else ''} is declared as table '{declared}'; "
                                         f"--name {given}={name} would declare it a second time. Rename the declaration "
                                         "and its three model files by hand, or drop --name to keep its name")
                    return name
        return declared or derived

    def unused(self) -> list[str]:
        return sorted(set(self.chosen) - self.used)


def declared_instances(project_dir: Path) -> dict[tuple[str, str], str]:
    """The declared change-table tables' names by (database name, lower-case capture instance):
    each database a table reads ('' in a project that declares none)."""
    databases = declared_databases(project_dir)
    return {(db.name, instance.lower()): name for name, table in tracked_table_declarations(project_dir).items()
            if table.channel == "change_tables" for db in table_databases(name, table, databases)[0]
            for instance, _ in table.instances}


# names a declared column cannot have (macro _check_declared_names refuses them): the columns the
# package adds to staging and the marts, and Spark's literals and niladic functions
RESERVED = ("capture_instance", "change_lsn", "changed_columns", "command_id", "commit_lsn", "commit_time",
            "is_current", "is_deleted", "landed_record", "operation", "operation_code", "quarantine_reason",
            "update_mask", "valid_from", "valid_from_lsn", "valid_to", "valid_to_lsn", "true", "false", "null",
            "current_date", "current_time", "current_timestamp", "current_user", "session_user", "user")


def column_name(source: str, taken: set[str]) -> str:
    """The package's name for a SQL Server column named `source`: the name itself when it is a
    plain identifier a declaration may have (existing declarations keep their names), else its
    snake case (letters without accents, digits and underscores: `Unit Price (EUR)` ->
    unit_price_eur, `1st Name` -> c_1st_name, `select` stays, `operation` -> operation_value),
    made unique among `taken` (lower case) with a number."""
    import unicodedata

    name = source
    if not re.fullmatch(r"[A-Za-z][A-Za-z0-9_]*", source) or source.lower() in RESERVED:
        spelled = source.translate(str.maketrans({"ß": "ss", "æ": "ae", "Æ": "Ae", "ø": "o", "Ø": "O", "œ": "oe",
                                                  "Œ": "Oe", "ł": "l", "Ł": "L", "đ": "d", "Đ": "D"}))
        ascii_text = unicodedata.normalize("NFKD", spelled).encode("ascii", "ignore").decode()
        name = re.sub(r"[^A-Za-z0-9]+", "_", re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", ascii_text)).strip("_").lower()
        name = name if re.match(r"[a-z]", name) else f"c_{name}".rstrip("_")
        name = f"{name}_value" if name in RESERVED else name
    unique, n = name, 2
    while unique.lower() in taken:
        unique, n = f"{name}_{n}", n + 1
    taken.add(unique.lower())
    return unique


def describe(metadata: dict[str, list[dict]], keys: dict[str, list[str]], naming: Naming | None = None,
             database: str = "") -> list[Captured]:
    """The capture instances one database's metadata describes, sorted by name (see Naming)."""
    naming = naming or Naming()
    instances: dict[str, dict] = {}
    by_object: dict[str, str] = {}
    for row in metadata["change_tables"]:
        if row.get("capture_instance"):
            instances[row["capture_instance"]] = row
            if row.get("object_id") is not None:
                by_object[str(row["object_id"])] = row["capture_instance"]
    columns: dict[str, dict[str, dict]] = {}
    for row in metadata["captured_columns"]:
        ci = row.get("capture_instance") or by_object.get(str(row.get("object_id")))
        if ci and row.get("column_name"):
            instances.setdefault(ci, {"capture_instance": ci})
            columns.setdefault(ci, {})[row["column_name"]] = row
    index: dict[str, list[tuple[int, str]]] = {}
    for row in metadata["index_columns"]:
        ci = row.get("capture_instance") or by_object.get(str(row.get("object_id")))
        if ci and row.get("column_name"):
            index.setdefault(ci, []).append((int(row.get("index_ordinal") or 0), row["column_name"]))
    result = []
    for ci, row in sorted(instances.items()):
        name = naming(ci, row, database)
        captured = Captured(ci, name, row.get("source_schema"), row.get("source_table"), database=database)
        taken: set[str] = set()
        named: dict[str, str] = {}  # source name -> the package's
        for column in sorted(columns.get(ci, {}).values(), key=lambda c: int(c["column_ordinal"])):
            declared_type = sql_type(column)
            if declared_type is None:
                captured.problems.append(
                    f"column {column['column_name']}: type {column.get('column_type') or column.get('data_type')!r} cannot be "
                    "declared (unsupported, or a decimal without numeric_precision and numeric_scale); left out")
                continue
            source = column["column_name"]
            named[source] = column_name(source, taken)
            captured.columns.append({"name": named[source], **({"source_name": source} if named[source] != source else {}),
                                     "type": declared_type, "ordinal": int(column["column_ordinal"])})
        if not captured.columns:
            captured.problems.append("no captured columns landed (export cdc.captured_columns)")
        given = keys.get(name) or keys.get(ci)
        if given:
            captured.key = given
        elif row.get("index_column_list"):
            captured.key = re.findall(r"\[([^\]]+)\]", row["index_column_list"]) or [
                k.strip() for k in row["index_column_list"].split(",")]
        elif ci in index:
            captured.key = [c for _, c in sorted(index[ci])]
        else:
            captured.problems.append("no key: export cdc.index_columns (or index_column_list) or pass --key "
                                     f"{name}=column[,column]")
        captured.key = [named.get(k, k) for k in captured.key]
        unknown = [k for k in captured.key if k not in {c["name"] for c in captured.columns}]
        if unknown:
            captured.problems.append(f"key column(s) {', '.join(unknown)} are not among its declared columns")
        captured.instances = [(ci, [c["name"] for c in captured.columns])]
        result.append(captured)
    return _one_per_table(result, instances)


def _one_per_table(described: list[Captured], rows: dict[str, dict]) -> list[Captured]:
    """Capture instances of the same source table as one table with several (docs/tables.md
    "Capture-instance changes"), oldest first (by start_lsn): the columns any of them captures
    (the older ones' first), each typed as the newest instance that captures it declares it, and
    the newest one's key."""
    def start(c: Captured) -> tuple[int, str]:
        text = str(rows[c.capture_instance].get("start_lsn") or "0").lower().removeprefix("0x").replace(":", "")
        return (int(text, 16) if re.fullmatch(r"[0-9a-f]+", text) else 0, c.capture_instance)

    groups: dict[tuple, list[Captured]] = {}
    for c in described:
        source = (str(c.source_schema).lower(), str(c.source_table).lower()) if c.source_table else (c.capture_instance,)
        groups.setdefault(source, []).append(c)
    result = []
    for group in groups.values():
        if len(group) == 1:
            result.append(group[0])
            continue
        group.sort(key=start)
        newest = group[-1]
        merged = Captured(newest.capture_instance, newest.name, newest.source_schema, newest.source_table,
                          newest.key or next((c.key for c in reversed(group) if c.key), []), database=newest.database)
        typed = {c["name"]: c["type"] for older in group for c in older.columns}  # the newest wins
        for older in group:
            merged.problems += [f"{older.capture_instance}: {p}" for p in older.problems if not p.startswith("no key")]
            merged.columns += [{**c, "type": typed[c["name"]], "ordinal": len(merged.columns) + 1}
                               for c in older.columns if c["name"] not in {m["name"] for m in merged.columns}]
            merged.instances += older.instances
        if not merged.key:
            merged.problems.append(f"no key: export cdc.index_columns (or index_column_list) or pass --key {merged.name}=column[,column]")
        result.append(merged)
    return sorted(result, key=lambda c: c.name)


def describe_estate(by_database: dict[str, dict[str, list[dict]]], keys: dict[str, list[str]], naming: Naming,
                    databases: dict[str, Database], tenants: list[str] = ()) -> list[Captured]:
    """The tables every database's metadata describes (by_database: read_metadata's, keyed by
    landing folder), sorted by name: one per capture instance and database, each declaring its
    database when the project declares any; a table of the databases a pattern of `tenants`
    matches (tenant_*) is one tenant table over all of them (docs/tables.md "Several databases"),
    whose databases must capture it alike: a database whose columns, types or key differ from
    the first's is named in its problems (it is not written)."""
    names = {db.id: name for name, db in databases.items()}  # landing folder -> declared name
    unknown = sorted(folder for folder in by_database if folder and folder not in databases)
    if unknown or ("" in by_database and databases and "" not in names):
        raise UsageError(f"scaffold: the landing folder holds metadata of {', '.join(unknown) or 'its top level'}, which var "
                         f"cdc_databases does not declare (declared: {', '.join(sorted(databases)) or 'none'}): declare "
                         "each database there first (docs/tables.md \"Several databases\")")
    claimed: dict[str, str] = {}
    for pattern in tenants:
        matched = [name for name in sorted(databases) if fnmatch.fnmatchcase(name, pattern)]
        if not matched:
            raise UsageError(f"scaffold: --tenants {pattern} matches no database of var cdc_databases "
                             f"({', '.join(sorted(databases)) or 'none declared'})")
        for name in matched:
            claimed.setdefault(name, pattern)
    per_database, fanned = [], {}
    for folder, metadata in sorted(by_database.items()):
        name = names.get(folder, folder) if databases else ""
        for captured in describe(metadata, keys, naming, name):
            if name in claimed:
                fanned.setdefault((claimed[name], (captured.source_schema or "").lower(), (captured.source_table or
                                   captured.capture_instance).lower()), []).append(captured)
            else:
                per_database.append(captured)
    for (pattern, _, _), group in sorted(fanned.items()):
        first = group[0]
        tenant = Captured(first.capture_instance, first.name, first.source_schema, first.source_table, list(first.key),
                          list(first.columns), list(first.problems), list(first.instances), tenants=pattern)
        shape = _shape(first)
        for other in group[1:]:
            if (differs := _shape(other)) != shape:
                tenant.problems.append(f"tenant database {other.database} captures it otherwise than {first.database}: "
                                       f"{_difference(shape, differs)}; declare that database's table apart, or make its "
                                       "capture match")
        per_database.append(tenant)
    return sorted(per_database, key=lambda c: (c.name, c.source))


def _shape(c: Captured) -> dict:
    """What a tenant table's databases must capture alike: each column's type and ordinal, and the key."""
    return {"columns": {col["name"]: (col["type"], col.get("ordinal")) for col in c.columns}, "key": list(c.key),
            "instances": [n.lower() for n, _ in c.instances]}


def _difference(mine: dict, theirs: dict) -> str:
    for column in sorted(set(mine["columns"]) | set(theirs["columns"])):
        a, b = mine["columns"].get(column), theirs["columns"].get(column)
        if a != b:
            return (f"column {column} missing" if b is None else f"column {column} not in the first" if a is None
                    else f"column {column} is {b[0]} (ordinal {b[1]}), not {a[0]} (ordinal {a[1]})")
    if mine["key"] != theirs["key"]:
        return f"key {', '.join(theirs['key'])}, not {', '.join(mine['key'])}"
    return f"capture instances {', '.join(theirs['instances'])}, not {', '.join(mine['instances'])}"


def scaffold(spark, project_dir: Path, landing_dir: Path | str, tables: list[str] = (),
             keys: dict[str, list[str]] | None = None, names: dict[str, str] | None = None,
             metadata: dict[str, dict[str, list[dict]]] | None = None, tenants: list[str] = ()) -> list[str]:
    """Writes or updates what each captured table of every database (or those named in `tables`,
    by name or capture instance) needs, named as Naming says (`names`: --name SOURCE=NAME), the
    tables of the databases `tenants` patterns match as tenant tables; returns the report's lines.
    A table with a problem that leaves it without columns or a key is reported and not written.
    `metadata`: the exports' rows per landing folder, when read already (default: read_metadata)."""
    naming = Naming(names, declared_instances(project_dir))
    databases = declared_databases(project_dir)
    described = describe_estate(read_metadata(spark, landing_dir) if metadata is None else metadata, keys or {}, naming,
                                databases, list(tenants))
    if unused := naming.unused():
        raise UsageError(f"scaffold: --name {', '.join(unused)}: no landed capture instance, source table or table "
                         f"name matches (known: {', '.join(c.source for c in described) or 'none'})")
    seen: dict[str, Captured] = {}
    for c in described:
        if c.name in seen:
            other = seen[c.name]
            remedy = c.source if c.database or c.tenants else c.capture_instance
            raise UsageError(f"scaffold: capture instances {other.source} and {c.source} of different source tables "
                             f"would both be named '{c.name}': pass --name {remedy}=OTHER_NAME")
        seen[c.name] = c
    if tables:
        known = {c.name for c in described} | {n for c in described for n, _ in c.instances}
        unknown = [t for t in tables if t not in known]
        if unknown:
            raise UsageError(f"scaffold: no landed metadata for {', '.join(unknown)} (known: "
                             f"{', '.join(c.name for c in described) or 'none'})")
        described = [c for c in described if c.name in tables or any(n in tables for n, _ in c.instances)]
    if not described:
        raise UsageError(f"scaffold: no capture instance in {display(str(landing_dir))}/cdc_metadata (land exports of "
                         "cdc.change_tables and cdc.captured_columns first)")
    report = []
    for captured in described:
        for problem in captured.problems:
            report.append(f"{captured.name} ({captured.source}): {problem}")
        if not captured.columns or not captured.key or any(p.startswith(("key column", "tenant database"))
                                                           for p in captured.problems):
            report.append(f"{captured.name}: not written")
            continue
        changes = [*_declare(project_dir, captured), *write_model_files(project_dir, captured.name, "change_tables"),
                   *_document(project_dir, captured)]
        report.append(f"{captured.name}: " + ("; ".join(changes) if changes else "unchanged"))
    return report


def _declare(project_dir: Path, captured: Captured) -> list[str]:
    """Writes or updates the table's declaration in dbt_project.yml, in place."""
    path = project_dir / "dbt_project.yml"
    text = path.read_text()
    existing = declared_tables(project_dir).get(captured.name)
    if existing is not None and existing.get("channel", "change_tables") != "change_tables":
        raise UsageError(f"scaffold: tracked table '{captured.name}' is declared with channel {existing['channel']}; "
                         "rename one of them")
    if existing is not None:
        theirs = {str(i).lower() for i in [existing.get("capture_instance"), *(
            i.get("name") for i in existing.get("capture_instances") or [] if isinstance(i, dict))] if i}
        elsewhere = captured.database and existing.get("database") not in (None, captured.database)
        if not theirs & {n.lower() for n, _ in captured.instances} or elsewhere:
            where = f" of {existing.get('database')}" if elsewhere else ""
            raise UsageError(f"scaffold: tracked table '{captured.name}' is declared for capture instance "
                             f"{', '.join(sorted(theirs))}{where}, not {captured.source}: pass --name "
                             f"{captured.source}=OTHER_NAME to declare it under another name"
                             + (" (it is the demo's: `python -m runner init` removes the demo's tables)"
                                if existing.get("demo") else ""))
    wanted = {**captured.declaration(), **{k: v for k, v in (existing or {}).items() if k not in OWNED}}
    dropped = {i.get("name") for i in (existing or {}).get("capture_instances") or [] if isinstance(i, dict) and i.get("dropped")}
    for instance in wanted.get("capture_instances", []):
        if instance["name"] in dropped:  # the user's mark (docs/tables.md "Capture-instance changes") stays
            instance["dropped"] = True
    if existing == wanted:
        return []

    def put(document) -> bool:
        tables = (document.get("vars") or {}).get("cdc_tracked_tables", False)
        if tables is False:
            raise UsageError("scaffold: dbt_project.yml has no `cdc_tracked_tables:` under `vars:`; add "
                             "`  cdc_tracked_tables: {}`")
        if tables is None:
            tables = document["vars"]["cdc_tracked_tables"] = CommentedMap()
        tables.fa.set_block_style()
        # the user's own fields keep their node (its style and comments); replacing keeps the table's place
        mine = tables.get(captured.name) or {}
        following = take_following_comments(mine or tables[list(tables)[-1]]) if tables else []
        tables[captured.name] = CommentedMap(
            (k, _styled(k, v) if k in OWNED or k not in mine else mine[k]) for k, v in wanted.items())
        give_following_comments(tables[captured.name], following)
        return True

    edit_yaml(path, put)
    written = declared_tables(project_dir).get(captured.name)
    if written != wanted:
        path.write_text(text)
        raise UsageError(f"scaffold: could not write the declaration of {captured.name} into dbt_project.yml "
                         "(its layout is not the one docs/tables.md shows); dbt_project.yml was left as it was")
    return ["declaration " + ("updated" if existing else "written")]


def _flow(node):
    node.fa.set_flow_style()
    return node


def _styled(field_name: str, value):
    """A declared field as docs/tables.md writes it: `key: [a, b]`, one `- {name: .., type: ..}` line
    per column, a capture instance's columns on one line."""
    if field_name == "key":
        return _flow(CommentedSeq(value))
    if field_name == "columns":  # a type with a comma is quoted, as in the demo's declarations
        return CommentedSeq(_flow(CommentedMap((k, DoubleQuotedScalarString(v) if "," in str(v) else v)
                                               for k, v in c.items())) for c in value)
    if field_name == "capture_instances":
        return CommentedSeq(CommentedMap((k, _flow(CommentedSeq(v)) if k == "columns" else v) for k, v in i.items())
                            for i in value)
    return value


def table_checks(name: str) -> list[dict]:
    """The data tests of a tracked table, as the demo's carry them on its current-state mart: one
    test with every check of the table, scoped to what a run applies (docs/operations.md "Checks:
    batch and audit")."""
    return [{"sqlserver_cdc.tracked_table_checks": {"arguments": {"table": name}}}]


def model_properties(captured: Captured) -> dict[str, list[dict]]:
    """The YAML entries (docs and data tests) of a change-table table's three models, per layer,
    as the demo's tables have them."""
    name, key = captured.name, captured.key
    source = ".".join(p for p in (captured.source_schema, captured.source_table) if p) or captured.capture_instance
    typed = [(c["name"], f"{c['type']}. {{{{ doc('{'key_column' if c['name'] in key else '{kind}'}') }}}}")
             for c in captured.columns]

    def columns(kind: str) -> list[dict]:
        return [{"name": n, "description": d.replace("{kind}", kind)} for n, d in typed]

    def doc(*names: str) -> list[dict]:
        return [{"name": n, "description": f"{{{{ doc('{n}') }}}}"} for n in names]

    staging = {
        "name": f"stg_change_tables__{name}",
        "description": f"Change rows of capture instance{'s' if len(captured.instances) > 1 else ''} "
                       + ", ".join(f"{n} (cdc.{n}_CT)" for n, _ in (captured.instances or [(captured.capture_instance, [])]))
                       + " "
                       f"for {source}: typed, `__$` names renamed, operation decoded. One row per landed row; "
                       "untrusted rows carry quarantine_reason.",
        "columns": [
            *doc("capture_instance", "commit_lsn", "change_lsn", "command_id", "operation", "operation_code", "update_mask"),
            *columns("captured_column"),
            *doc("quarantine_reason", "landed_record", "_source_file", "_batch_id", "_ingested_at"),
        ],
    }
    current = {
        "name": f"{name}_current",
        "description": f"Current state of {source} (SCD type 1) as of the mart's watermark: one row per key, with the "
                       "commit LSN, commit time and operation of the last change. See docs/marts.md \"Marts\".",
        "data_tests": table_checks(name),
        "columns": [
            *columns("captured_column"),
            {"name": "commit_lsn", "description": "{{ doc('current_commit_lsn') }}"},
            {"name": "commit_time", "description": "{{ doc('current_commit_time') }}"},
            {"name": "operation", "description": "{{ doc('current_operation') }}"},
            *doc("is_deleted"),
        ],
    }
    history = {
        "name": f"{name}_history",
        "description": f"History of {source} (SCD type 2): one version per key per committed transaction that changed "
                       "it, with validity ranges in LSNs and commit times. See docs/marts.md \"Marts\".",
        "columns": [
            *columns("captured_column"),
            *doc("valid_from_lsn", "valid_to_lsn", "valid_from", "valid_to", "is_current"),
            {"name": "operation", "description": "{{ doc('history_operation') }}"},
            *doc("changed_columns", "is_deleted"),
        ],
    }
    return {"staging": [staging], "marts": [current, history]}


def _document(project_dir: Path, captured: Captured) -> list[str]:
    """Appends the YAML entries of the table's models that have none to the layer's YAML file (the
    rest of the file as it was); entries that exist are left as they are (the user may have edited them)."""
    documented = set()
    for yml in (project_dir / "models").rglob("*.yml"):
        documented |= {m.get("name") for m in ((yaml.safe_load(yml.read_text()) or {}).get("models") or [])}
    written = []
    for layer, entries in model_properties(captured).items():
        missing = [e for e in entries if e["name"] not in documented]
        if not missing:
            continue
        path = project_dir / YAML_FILES[layer]
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text("version: 2\n\nmodels: []\n")

        def append(document, missing: list[dict] = missing) -> bool:
            models = document.get("models")
            if models is None:
                models = document["models"] = CommentedSeq()
            models.fa.set_block_style()
            following = take_following_comments(models) if models else []
            models.extend(_quoted(e) for e in missing)
            give_following_comments(models, following)
            return True

        edit_yaml(path, append)
        written.append(f"{', '.join(e['name'] for e in missing)} documented in {YAML_FILES[layer]}")
    return written


def _quoted(value):
    """A YAML entry with its Jinja (`{{ doc('...') }}`) in double quotes, as the project's files write it."""
    if isinstance(value, dict):
        return CommentedMap((k, _quoted(v)) for k, v in value.items())
    if isinstance(value, list):
        return CommentedSeq(_quoted(v) for v in value)
    return DoubleQuotedScalarString(value) if isinstance(value, str) and "{{" in value else value
