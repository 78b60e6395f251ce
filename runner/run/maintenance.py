"""Maintenance of the tables the runner writes (docs/operations.md "Maintenance"): every decision
about compaction, VACUUM, the retention properties and the raw table's retention, as plain
functions over small facts, so the tests run them without Spark (tests/pipeline/test_maintenance.py).

A pass (`python -m runner maintain`, or `serve` between runs every --maintain-every) reads, per
table, what `DESCRIBE DETAIL` says of it now (files, bytes, properties, the time of its last
commit) and the last row the maintenance ledger holds for it (macro maintenance_facts), and decides
per table (`plan_table`):

- the retention properties: `delta.deletedFileRetentionDuration` is the retention users choose
  (var cdc_maintenance.retention_hours, Delta's 7 days by default). VACUUM keeps removed files
  that long, and Delta refuses time travel to a version older than it, naming the property.
  `delta.logRetentionDuration` is set to the same: a version older than the files kept cannot be
  read, so the log need not keep it, and Delta's 30 days of commits are most of a small table's
  bytes at five-minute runs (docs/performance.md "Maintenance"); Delta requires the log's
  retention to be at least the files';
- compaction (`OPTIMIZE`): when the table holds `compact_after_files` more files than it did after
  its last compaction (a table never compacted: that many files). OPTIMIZE bin-packs the small
  files and rewrites those whose deletion vectors hide more than Delta's 5% of their rows, so it
  also purges the marts' deletion vectors;
- VACUUM: once every `vacuum_every_hours`, when the table may hold files removed since the last
  VACUUM's cut-off (a commit of a run, or a compaction, after it);
- the raw table's retention (`raw_retention_days`, off by default): the landed rows of batches
  older than that and taken in by every staging model are deleted (never the landed-file
  records or Kafka offsets, which tell what landed); `--restage` then refuses to rebuild staging
  from a raw table that no longer holds every batch (`restage_refusal`).

Nothing here runs inside a run: a pass takes the runner lock (`maintain`) or runs in `serve`'s loop
between runs, one table at a time, so a run that falls due waits for one table's maintenance at
most. Every statement is one Delta commit or a deletion of files no version references: a pass
killed halfway leaves every table readable and the next pass (and run) exact."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone

from runner.run.plan import BATCH_STAMP, EVENT_MODELS, METADATA_MODELS

# Delta's default: a VACUUM keeps removed files 7 days (the log's 30 days become the same, wanted_properties)
DELTA_FILE_RETENTION_HOURS = 168.0
RETENTION = "delta.deletedFileRetentionDuration"
LOG_RETENTION = "delta.logRetentionDuration"
# landing kinds of the raw table that record what landed (runner/sources/landing.py, kafka.py):
# never deleted by the raw retention, whose batches would otherwise land again
RECORD_KINDS = ("landed_files", "kafka_offsets")


@dataclass(frozen=True)
class Settings:
    """var cdc_maintenance (runner/project/config.py maintenance_settings)."""

    compact_after_files: int = 32
    retention_hours: float = DELTA_FILE_RETENTION_HOURS
    vacuum_every_hours: float = 24.0
    raw_retention_days: float | None = None
    overdue_hours: float = 48.0


@dataclass(frozen=True)
class Last:
    """What the maintenance ledger's last row for a table says (None fields: never done)."""

    at: datetime  # when that maintenance started
    files_after: int  # its files after that maintenance
    compacted_files: int | None = None  # its files right after its last compaction
    vacuumed_at: datetime | None = None  # when its last VACUUM ran
    # DESCRIBE DETAIL's lastModified after that maintenance (its own commits included), as text: a
    # table whose lastModified differs was written since (compared, never read as a time: a
    # session's timestamps are in its process's zone)
    modified_after: str | None = None
    removed_through: datetime | None = None  # the latest time it may have removed files (a run's commit, a compaction)
    reclaimable: int | None = None  # bytes on disk beyond its live ones after that maintenance


@dataclass(frozen=True)
class TableState:
    """A table the runner writes, as maintenance_facts reports it."""

    relation: str
    kind: str  # raw | staging | mart | ledger | watermarks | maintenance
    files: int
    bytes: int
    modified: str | None  # DESCRIBE DETAIL lastModified, as text (see Last.modified_after)
    properties: dict[str, str] = field(default_factory=dict)
    last: Last | None = None


@dataclass
class Task:
    """What a pass does to one table, and why (empty: nothing)."""

    relation: str
    kind: str
    properties: dict[str, str] = field(default_factory=dict)
    compact: bool = False
    vacuum: bool = False
    raw: RawCut | None = None  # the raw table: the landed rows to delete
    # the latest time the table may have removed files, as the ledger records it after this pass
    removed_through: datetime | None = None
    why: list[str] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        return not (self.properties or self.compact or self.vacuum or self.raw)


def interval(hours: float) -> str:
    """A retention as Delta's table properties take it."""
    return f"interval {hours:g} hours"


def hours_of(value: str | None) -> float | None:
    """The hours of a Delta interval property (`interval 7 days`, `interval 168 hours`, `1 week`);
    None when unset or unreadable."""
    words = (value or "").lower().replace("interval", " ").split()
    if not words or len(words) % 2:
        return None
    units = {"week": 168.0, "day": 24.0, "hour": 1.0, "minute": 1 / 60, "second": 1 / 3600}
    try:
        return sum(float(words[i]) * units[words[i + 1].rstrip("s")] for i in range(0, len(words), 2))
    except (ValueError, KeyError):
        return None


def wanted_properties(settings: Settings, properties: dict[str, str]) -> dict[str, str]:
    """The retention properties to set on a table (those that differ from what it has): the file
    retention the settings give, and the log's retention equal to it."""
    return {key: interval(settings.retention_hours) for key in (RETENTION, LOG_RETENTION)
            if hours_of(properties.get(key)) != settings.retention_hours}


def plan_table(state: TableState, settings: Settings, now: datetime, raw: RawCut | None = None) -> Task:
    """One table's task in a pass (see the module's docstring); `raw`: for the raw table, the
    landed rows the retention deletes (raw_cutoff), taken with its VACUUM (once a vacuum_every_hours)."""
    task = Task(state.relation, state.kind)
    last = state.last
    task.properties = wanted_properties(settings, state.properties)
    if task.properties:
        task.why.append("retention " + ", ".join(f"{k} = {v}" for k, v in sorted(task.properties.items())))
    baseline = last.compacted_files if last and last.compacted_files is not None else 0
    if state.files - baseline >= settings.compact_after_files:
        task.compact = True
        task.why.append(f"{state.files} files, {state.files - baseline} more than after its last compaction"
                        if baseline else f"{state.files} files, never compacted")
    # the latest time it may have removed files: now, when it was written since the last pass (its
    # own commits are not: modified_after is its last commit after that pass); a compaction now
    written = state.modified is not None and (last is None or state.modified != last.modified_after)
    removed = now if written else last.removed_through if last else None
    vacuumed = last.vacuumed_at if last else None
    keep = timedelta(hours=settings.retention_hours)
    if removed is not None and (vacuumed is None or (now - vacuumed >= timedelta(hours=settings.vacuum_every_hours)
                                                     and removed > vacuumed - keep)):
        task.vacuum = True
        task.why.append("VACUUM: never vacuumed" if vacuumed is None else
                        f"VACUUM: the last {_ago(now - vacuumed)} ago, files removed since its cut-off")
        if raw is not None and state.kind == "raw":
            task.raw = raw
            task.why.append(f"raw retention: the landed rows of {raw}")
    task.removed_through = now if task.compact or task.raw else removed
    return task


def order(tasks: list[Task], states: dict[str, TableState]) -> list[Task]:
    """The tasks with work, most files first (the tables whose reads cost most)."""
    return sorted((t for t in tasks if not t.empty), key=lambda t: (-states[t.relation].files, t.relation))


@dataclass(frozen=True)
class RawSource:
    """Landed rows of the raw table that staging models take in: a landing kind, its entities
    (None: all of them; lower case) and the last batch every model reading them took in ('' for
    none yet)."""

    kind: str
    entities: tuple[str, ...] | None
    through: str


@dataclass(frozen=True)
class RawCut:
    """The landed rows of the raw table a pass deletes: those of batches before `before` (the
    retention's time) of each source, at or before the batch its staging took in."""

    before: str
    sources: tuple[RawSource, ...]

    def __str__(self) -> str:
        return f"batches before {self.before} that their staging models took in"


def raw_cutoff(settings: Settings, now: datetime, sources: list[RawSource], waiting_from: str = "") -> RawCut | None:
    """The raw table's rows a pass may delete (None: none): none while raw_retention_days is unset;
    else, of each source some staging model took in, the rows of batches older than
    `raw_retention_days` before now and never past the batch its staging took in; never from a
    manifest that waits beyond a gap on (`waiting_from`, the run ledger's manifests_from), which a
    later run still reads. The raw table's other rows (landed-file records, Kafka offsets,
    manifests) are kept."""
    if settings.raw_retention_days is None:
        return None
    taken = tuple(s for s in sources if s.through)
    if not taken:
        return None
    before = (now - timedelta(days=settings.raw_retention_days)).strftime(BATCH_STAMP)
    if waiting_from:
        before = min(before, waiting_from)
    return RawCut(before, taken)


def raw_sources(tables: list[tuple[str, str, list[str]]], staged_through: dict[str, str]) -> list[RawSource]:
    """What each staging model takes in from the raw table, with the last batch it took in
    (`staged_through`, by model): the metadata exports (runner/run/plan.py METADATA_MODELS), the
    event channels' lines, each change-table table's capture instances and snapshots. `tables`:
    (name, channel, capture instances) of the declared tables. A source read by two models
    (cdc_metadata/change_tables) is taken in as far as the one behind."""
    reads: dict[tuple[str, str | None], list[str]] = {}
    for model, landed in METADATA_MODELS.items():
        for source in landed:
            kind, _, entity = source.partition("/")
            reads.setdefault((kind, entity), []).append(model)
    for channel, model in EVENT_MODELS.items():
        if any(c == channel for _, c, _ in tables):
            reads.setdefault((channel, None), []).append(model)
    for name, channel, instances in tables:
        if channel == "change_tables":
            for instance in instances:
                reads.setdefault(("change_tables", instance.lower()), []).append(f"stg_change_tables__{name}")
            reads.setdefault(("snapshots", name.lower()), []).append(f"stg_change_tables__{name}")
    found = []
    for (kind, entity), models in sorted(reads.items(), key=lambda item: (item[0][0], item[0][1] or "")):
        marks = [staged_through.get(m) or "" for m in models]
        found.append(RawSource(kind, None if entity is None else (entity,), "" if "" in marks else min(marks)))
    return found


def restage_refusal(held_from: str | None, retention_days: float | None) -> str | None:
    """Why `--restage` is refused: the raw retention deleted the landed rows of the batches before
    `held_from` (the maintenance ledger's), so staging cannot be rebuilt from the raw table."""
    if not held_from:
        return None
    kept = f" (var cdc_maintenance.raw_retention_days: {retention_days:g})" if retention_days is not None else ""
    return (f"--restage rebuilds every staging table from the raw table, which no longer holds the landed rows of "
            f"batches before {held_from}{kept}: the oldest batch it can rebuild from is {held_from}, and staging "
            "holds older ones. Nothing was changed. Staging still holds every batch typed: --full-refresh rebuilds the "
            "marts from it. To restage, land the exports of the earlier batches again into a new warehouse, or restore "
            "the raw table from a backup (docs/operations.md \"Maintenance\")")


def overdue(settings: Settings, now: datetime, last_maintained: datetime | None,
            first_run: datetime | None) -> str | None:
    """The run summary's line when no maintenance ran for `overdue_hours` (never: since the
    warehouse's first run, `first_run`), else None."""
    since = last_maintained or first_run
    if since is None or now - since < timedelta(hours=settings.overdue_hours):
        return None
    what = f"the last maintenance ran {_ago(now - since)} ago" if last_maintained else \
        f"no maintenance ran since the first run, {_ago(now - since)} ago"
    return (f"WARNING maintenance overdue: {what} (over var cdc_maintenance.overdue_hours, {settings.overdue_hours:g}): "
            "files accumulate and removed ones stay on disk. Run python -m runner maintain (e.g. hourly from cron), or "
            "keep python -m runner serve running, which maintains between runs; python -m runner status lists each "
            "table (docs/operations.md \"Maintenance\")")


def utcnow() -> datetime:
    """Now, UTC, naive (as every time of these facts)."""
    return datetime.now(timezone.utc).replace(tzinfo=None)


def parse_time(text: str | None) -> datetime | None:
    """A time as the ledgers write it (`2026-12-01 09:00:00[.ffffff]`, ISO with T and Z too), naive UTC."""
    if not text:
        return None
    try:
        return datetime.fromisoformat(str(text).replace("Z", "").replace("T", " ")[:26])
    except ValueError:
        return None


def batch_time(batch: str) -> datetime | None:
    """The time a batch id (or run id) starts with."""
    try:
        return datetime.strptime(batch[:22], BATCH_STAMP)
    except (TypeError, ValueError):
        return None


def _ago(delta: timedelta) -> str:
    seconds = int(delta.total_seconds())
    if seconds >= 86400:
        return f"{seconds // 86400}d{seconds % 86400 // 3600:02d}h"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
