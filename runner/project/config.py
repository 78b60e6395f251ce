"""What users write, read in one place as typed models (pydantic) with errors naming the field:
the project's vars in dbt_project.yml (tracked tables, Kafka sources, CSV dialects) and the export
manifests in the landing folder. The dbt side checks declarations again when it compiles
(macro tracked_table: names, types, options); this side checks what the runner needs before
Spark starts."""

from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictInt,
    StrictStr,
    ValidationError,
    model_validator,
)

from runner.errors import UsageError

ENV_NAME = r"^[A-Za-z_][A-Za-z0-9_]*$"
# Kafka consumer options the runner sets itself (Spark's Kafka source refuses most of them)
MANAGED = {"bootstrap.servers", "key.deserializer", "value.deserializer", "auto.offset.reset", "enable.auto.commit",
           "interceptor.classes", "allow.auto.create.topics", "group.id"}
# option names whose values are secrets: only through secret_options (environment variables)
SECRET = re.compile(r"(?i)jaas|password|secret|token|credential|(^|\.)key$")
Count = Field(ge=0)


def explain(exc: ValidationError) -> str:
    """A validation error as one phrase per problem, each naming its field (`files.0.rows: ...`);
    unknown fields together, with the known ones."""
    extra = [".".join(map(str, e["loc"])) for e in exc.errors() if e["type"] == "extra_forbidden"]
    parts = [f"unknown field(s) {', '.join(extra)}"] if extra else []
    for e in exc.errors():
        if e["type"] != "extra_forbidden":
            where = ".".join(map(str, e["loc"]))
            message = e["msg"].removeprefix("Value error, ")
            parts.append(f"{where}: {message}" if where else message)
    return "; ".join(parts)


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


# --- export manifests (docs/landing.md "Export manifests", "Snapshots")

class ManifestFile(_Model):
    path: StrictStr = Field(min_length=1)
    rows: StrictInt = Count
    bytes: StrictInt | None = Field(default=None, ge=0)


class ExportManifest(_Model):
    """An export of a capture instance's changes: the LSN range (after_lsn, through_lsn] it covers,
    and its files with their row counts. The LSNs parse in SQL, like every other LSN (macro probe_files)."""

    capture_instance: StrictStr
    through_lsn: StrictStr
    after_lsn: StrictStr | None = None
    files: list[ManifestFile]


class SnapshotManifest(_Model):
    """A snapshot of a tracked table, consistent at snapshot_lsn, and its files."""

    table: StrictStr
    snapshot_lsn: StrictStr
    files: list[ManifestFile]


# --- Kafka sources (docs/channels.md "Reading from Kafka and Event Hubs")

class KafkaSourceSpec(_Model):
    channel: Literal["ces", "debezium"]
    bootstrap_servers: StrictStr | None = None
    bootstrap_servers_env: StrictStr | None = Field(default=None, pattern=ENV_NAME)
    topics: list[StrictStr] | None = Field(default=None, min_length=1)
    topic_pattern: StrictStr | None = None
    starting_offsets: Literal["earliest", "latest"] = "earliest"
    options: dict[str, StrictStr | StrictInt | float | bool] = Field(default_factory=dict)
    secret_options: dict[str, StrictStr] = Field(default_factory=dict)  # option -> environment variable

    @model_validator(mode="after")
    def _consistent(self) -> KafkaSourceSpec:
        if (self.bootstrap_servers is None) == (self.bootstrap_servers_env is None):
            raise ValueError("give bootstrap_servers or bootstrap_servers_env (an environment variable), one")
        if (self.topics is None) == (self.topic_pattern is None):
            raise ValueError("give topics (a list) or topic_pattern (a regular expression), one")
        if self.topics is not None and not all(self.topics):
            raise ValueError("topics must be a non-empty list of topic names")
        if self.topic_pattern is not None:
            try:
                re.compile(self.topic_pattern)
            except re.error as exc:
                raise ValueError(f"topic_pattern {self.topic_pattern!r} is not a regular expression: {exc}") from None
        for option in [*self.options, *self.secret_options]:
            if option in MANAGED:
                raise ValueError(f"option {option} is set by the runner; leave it out")
        for option in self.options:
            if SECRET.search(option):
                raise ValueError(f"option {option} holds a secret: move it to secret_options, naming the environment "
                                 "variable that holds it (secrets never sit in files)")
        for option, variable in self.secret_options.items():
            if not re.match(ENV_NAME, variable):
                raise ValueError(f"secret_options.{option} must name an environment variable (not hold the secret "
                                 "itself)")
        return self


# --- databases (docs/tables.md "Several databases"): the var cdc_databases

# a database's name is a folder of the landing folder (databases/<name>/) and a value of the
# marts' source_database column: letters, digits, '_', '-' and '.', starting with a letter or digit
DATABASE_NAME = r"^[A-Za-z0-9][A-Za-z0-9_.-]*$"
# the landing folder that holds the exports of every database but the default one
DATABASES_FOLDER = "databases"


class DatabaseDeclaration(_Model):
    """One database of the estate: its exports in `databases/<name>/` of the landing folder, or,
    for the one marked default, at the landing folder's top level (where a one-database project
    keeps them)."""

    default: bool = False
    database: StrictStr | None = Field(default=None, min_length=1)  # its name on SQL Server (default: the key)
    server: StrictStr | None = Field(default=None, min_length=1)  # Debezium: the connector's logical name (source.name)
    database_guid: StrictStr | None = Field(default=None, min_length=1)  # CES: the GUID starting each event's logicalid
    time_zone: StrictStr | None = Field(default=None, min_length=1)  # its server's (default: var cdc_source_time_zone)


@dataclass(frozen=True)
class Database:
    """A database as the runner keys it: `id` '' for the default one (the landing folder's top
    level, NULL in the raw table's source_database), else its declared name; `name` its declared
    name ('' when the project declares none); `sql_name` its name on SQL Server (events carry it)."""

    id: str
    name: str
    sql_name: str | None = None
    server: str | None = None
    guid: str | None = None

    @property
    def folder(self) -> str:
        """Its folder in the landing folder, with a trailing slash ('' for the top level)."""
        return f"{DATABASES_FOLDER}/{self.id}/" if self.id else ""

    def label(self) -> str:
        return self.name or "the default database"


def declared_databases(project_dir: Path) -> dict[str, Database]:
    """The var cdc_databases, checked, by name (empty when the project declares none: its one
    database is the default one). UsageError names the database and the field."""
    declared = project_vars(project_dir).get("cdc_databases") or {}
    if not isinstance(declared, dict):
        raise UsageError("var cdc_databases must map each database's name to its settings, e.g. {erp: {}, crm: {database: "
                         "CRM_Prod}} (docs/tables.md \"Several databases\")")
    databases, defaults = {}, []
    for name, settings in declared.items():
        name = str(name)
        if not re.match(DATABASE_NAME, name):
            raise UsageError(f"var cdc_databases: database name {name!r} must be letters, digits, '_', '-' or '.', starting "
                             "with a letter or digit (it names a folder of the landing folder and a source_database value)")
        try:
            d = DatabaseDeclaration.model_validate(settings or {})
        except ValidationError as exc:
            raise UsageError(f"var cdc_databases: database '{name}': {explain(exc)} (docs/tables.md \"Several "
                             "databases\")") from None
        if d.default:
            defaults.append(name)
        databases[name] = Database("" if d.default else name, name, d.database or name, d.server, d.database_guid)
    if len(defaults) > 1:
        raise UsageError(f"var cdc_databases: {', '.join(defaults)} are each marked default: true; one database at most is "
                         "the default one (its exports at the landing folder's top level)")
    return databases


def table_databases(name: str, table: TableDeclaration, databases: dict[str, Database]) -> tuple[list[Database], bool]:
    """The databases a tracked table reads, and whether it is a tenant table (its marts keyed by
    source_database too): `databases` (names or patterns, `tenant_*`) fans several into one pair
    of marts; `database` names its one; neither reads the project's one database, which is the
    only choice while at most one is declared. UsageError names the table and the remedy."""
    where = f"tracked table '{name}' in dbt_project.yml"
    if table.databases is not None and table.source_database:
        raise UsageError(f"{where}: a tenant table (databases) takes each database's name on SQL Server from var "
                         "cdc_databases; leave source_database out")
    if table.databases is not None:
        found: list[Database] = []
        for pattern in table.databases:
            matched = [d for key, d in sorted(databases.items()) if fnmatch.fnmatchcase(key, pattern)]
            if not matched:
                raise UsageError(f"{where}: databases: {pattern!r} matches no database of var cdc_databases "
                                 f"({', '.join(sorted(databases)) or 'none declared'}); declare it there (docs/tables.md "
                                 "\"Several databases\")")
            found += [d for d in matched if d not in found]
        return sorted(found, key=lambda d: d.name), True
    if table.database is not None:
        if table.database not in databases:
            raise UsageError(f"{where}: database '{table.database}' is not declared in var cdc_databases (declared: "
                             f"{', '.join(sorted(databases)) or 'none'}); declare it there (docs/tables.md \"Several "
                             "databases\")")
        db = databases[table.database]
        if table.source_database and table.source_database.lower() != (db.sql_name or "").lower():
            raise UsageError(f"{where}: source_database '{table.source_database}' is not the name on SQL Server of its "
                             f"database '{table.database}' ({db.sql_name}): leave source_database out, or set database: "
                             f"under var cdc_databases.{table.database}")
        return [db], False
    if len(databases) > 1:
        raise UsageError(f"{where}: the project declares {len(databases)} databases ({', '.join(sorted(databases))}); say "
                         "which this table comes from: database: <name>, or databases: [<name or pattern>, ...] for one "
                         "pair of marts over several (docs/tables.md \"Several databases\")")
    return (list(databases.values()) or [Database("", "")]), False


# --- tracked tables (docs/tables.md "Declaring a tracked table"): the fields the runner reads;
# others (history_columns, soft_deletes, debezium, ...) are the dbt side's to check

class _Open(BaseModel):
    model_config = ConfigDict(extra="allow", frozen=True)


class ColumnDeclaration(_Open):
    name: StrictStr
    type: StrictStr
    ordinal: StrictInt | None = Field(default=None, ge=1)
    # the column's name in the exports, CES and Debezium events when it is not a plain identifier
    # (`Order Date`, `[desc]`); `name` is then the package's (docs/tables.md "Names")
    source_name: StrictStr | None = Field(default=None, min_length=1)

    @property
    def source(self) -> str:
        return self.source_name or self.name


class InstanceDeclaration(_Open):
    name: StrictStr
    columns: list[StrictStr] = Field(min_length=1)
    dropped: bool = False


class TableDeclaration(_Open):
    channel: Literal["change_tables", "ces", "debezium"] = "change_tables"
    capture_instance: StrictStr | None = None
    capture_instances: list[InstanceDeclaration] | None = Field(default=None, min_length=1)
    database: StrictStr | None = None  # the declared database it comes from (var cdc_databases)
    databases: list[StrictStr] | None = Field(default=None, min_length=1)  # a tenant table's: names or patterns
    source_database: StrictStr | None = None
    source_schema: StrictStr | None = None
    source_table: StrictStr | None = None
    key: list[StrictStr] = Field(min_length=1)
    columns: list[ColumnDeclaration] = Field(min_length=1)
    demo: bool = False  # one of the demo's tables, which `python -m runner init` removes

    @model_validator(mode="after")
    def _instances(self) -> TableDeclaration:
        if self.database is not None and self.databases is not None:
            raise ValueError("give database (its one database) or databases (a tenant table over several), one")
        if self.channel == "change_tables":
            if (self.capture_instance is None) == (self.capture_instances is None):
                raise ValueError("give capture_instance or capture_instances (a table captured by several), one")
            if self.capture_instances is None and any(c.ordinal is None for c in self.columns):
                raise ValueError("every column needs its ordinal (cdc.captured_columns.column_ordinal)")
        return self

    @property
    def instances(self) -> list[tuple[str, list[str] | None]]:
        """Its capture instances, oldest first, with the columns each captures (None: the table's)."""
        if self.capture_instances:
            return [(i.name, list(i.columns)) for i in self.capture_instances]
        return [(self.capture_instance, None)] if self.capture_instance else []


def tracked_table_declarations(project_dir: Path) -> dict[str, TableDeclaration]:
    """The var cdc_tracked_tables, checked, each table's databases among them (UsageError names
    the table and the field)."""
    checked = {}
    for name, declared in declared_tables(project_dir).items():
        try:
            checked[str(name)] = TableDeclaration.model_validate(declared)
        except ValidationError as exc:
            raise UsageError(f"tracked table '{name}' in dbt_project.yml: {explain(exc)} (docs/tables.md "
                             "\"Declaring a tracked table\")") from None
    databases = declared_databases(project_dir)
    for name, table in checked.items():
        table_databases(name, table, databases)
    return checked


# --- the project's vars, read once per call


def project_vars(project_dir: Path) -> dict:
    """The vars of the project's dbt_project.yml (UsageError when it is missing)."""
    path = project_dir / "dbt_project.yml"
    if not path.exists():
        raise UsageError(f"no dbt_project.yml in {project_dir}; pass --project-dir to the project folder")
    return (yaml.safe_load(path.read_text()) or {}).get("vars") or {}


def export_manifests_required(project_dir: Path) -> bool:
    """The var cdc_export_manifests (docs/landing.md "Export manifests"): `optional` (the default:
    a declared capture instance without manifests follows the lsn_time_mapping alone, with a
    warning) or `required` (one without a landed manifest holds the cut where its exports reach:
    nowhere until its first lands)."""
    mode = project_vars(project_dir).get("cdc_export_manifests", "optional")
    if mode not in ("optional", "required"):
        raise UsageError(f"var cdc_export_manifests must be 'optional' or 'required'; got {mode!r}")
    return mode == "required"


def declared_tables(project_dir: Path) -> dict[str, dict]:
    """The var cdc_tracked_tables: each tracked table's declaration, by name."""
    declared = project_vars(project_dir).get("cdc_tracked_tables") or {}
    if not isinstance(declared, dict):
        raise UsageError("var cdc_tracked_tables must map each tracked table's name to its declaration "
                         "(docs/tables.md \"Declaring a tracked table\")")
    return declared


# --- maintenance (docs/operations.md "Maintenance"): the var cdc_maintenance

class MaintenanceDeclaration(_Model):
    compact_after_files: StrictInt = Field(default=32, ge=2)
    retention_hours: float = Field(default=168.0, ge=0)
    vacuum_every_hours: float = Field(default=24.0, gt=0)
    raw_retention_days: float | None = Field(default=None, gt=0)
    overdue_hours: float = Field(default=48.0, gt=0)


def maintenance_settings(project_dir: Path):
    """The var cdc_maintenance, checked (runner/run/maintenance.py Settings); UsageError names the field."""
    from runner.run.maintenance import Settings

    declared = project_vars(project_dir).get("cdc_maintenance") or {}
    if not isinstance(declared, dict):
        raise UsageError("var cdc_maintenance must map settings to values, e.g. {retention_hours: 168} "
                         "(docs/operations.md \"Maintenance\")")
    try:
        d = MaintenanceDeclaration.model_validate(declared)
    except ValidationError as exc:
        raise UsageError(f"var cdc_maintenance: {explain(exc)} (docs/operations.md \"Maintenance\")") from None
    return Settings(**d.model_dump())
