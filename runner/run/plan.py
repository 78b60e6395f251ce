"""Run planning (docs/operations.md "The runner"): every decision a run makes about its data, as
plain functions over plain data, so the tests run them without Spark (tests/pipeline/test_plan.py).

A run lands what is new and reads a few small facts (the macro `begin_run` reports them): what
landed since the previous run per source (capture instance, snapshot folder, metadata export,
event channel, and the event tables the new events route to), the export manifests, each model's
watermark, the relations that exist and the previous run's ledger row. From them `plan_run`
decides:

- per channel the window's upper bound: the largest commit LSN landed so far (change tables: in
  cdc.lsn_time_mapping), or `--upper-lsn`; for change tables never above the export cut
  (`export_cut`, docs/landing.md "Export manifests"), and per event channel the last landing batch
  holding its events;
- per tracked table whether anything lies in its window (`TablePlan.apply`) and each model's
  window (`ModelWindow`): staging takes the batches after the last one it took in; a mart applies
  the changes above its own watermark up to the bound (from a snapshot above both marts'
  watermarks, which then reconciles them); a table whose window starts where cleanup already
  removed changes is stopped with the remedy, and so is one whose capture instance has an export
  refused this run (its whole copy must not land below the marts' watermark); a table whose
  changes arrived at or below its marts' watermark (a late or corrected export) rebuilds its
  marts from staging;
- which models to build (`Plan.build`): a model whose inputs landed after its watermark, a table
  with changes in its window, a relation that does not exist yet; a table with nothing to do
  costs no dbt node, and its marts' watermarks move to the bound after the build (`advance`);
- "nothing to do": nothing landed, nothing to build, no watermark to move.

Every LSN decision is made per database (docs/tables.md "Several databases"): each database of
the project has its own LSN space, lsn_time_mapping, manifests, snapshots, cleanup retention and
watermarks, so a key of a per-database fact is `dbkey(database, key)` (the key itself for the
default database, `databases/<database>/<key>` for another, as its landing folder), and a mart's
window has one part per database it applies (`DbWindow`; a tenant table's marts apply several).

After the build, `advance` decides from dbt's results which watermarks move and the run's status.
The plan reaches the models as var `cdc_plan` (the macro `cdc_window` reads it); the run ledger
row is written once, at the end, with the plan and the outcome.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields
from datetime import datetime, timedelta

CHANNELS = ("change_tables", "ces", "debezium")
EVENT_CHANNELS = ("ces", "debezium")
MAPPING = "cdc_metadata/lsn_time_mapping"
# the metadata staging models and the landed sources each one takes in
METADATA_MODELS = {
    "stg_cdc_metadata__lsn_time_mapping": ("cdc_metadata/lsn_time_mapping",),
    "stg_cdc_metadata__change_tables": ("cdc_metadata/change_tables",),
    "stg_cdc_metadata__captured_columns": ("cdc_metadata/captured_columns", "cdc_metadata/change_tables"),
}
EVENT_MODELS = {"ces": "stg_ces__events", "debezium": "stg_debezium__events"}
VIEWS = ("cdc_quarantine",)
MAX_LSN = "FFFFFFFFFFFFFFFFFFFF"
DATABASES = "databases"


def dbkey(database: str, key: str) -> str:
    """A per-database key: `key` for the default database (''), `databases/<database>/<key>`
    for another (its landing folder's path, for a landed source)."""
    return f"{DATABASES}/{database}/{key}" if database else key


def split_dbkey(key: str) -> tuple[str, str]:
    """(database, key) of a dbkey."""
    if key.startswith(DATABASES + "/"):
        database, _, rest = key[len(DATABASES) + 1:].partition("/")
        return database, rest
    return "", key


# ---- facts ------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Landed:
    """What landed from one source: its largest commit LSN (None when it carries none) and the
    last landing batch holding its records; in what arrived since the previous run also its
    smallest commit LSN (the batch checks read the staged rows of that range)."""

    lsn: str | None
    batch: str
    min_lsn: str | None = None

    def merge(self, other: Landed | None) -> Landed:
        if other is None:
            return self
        return Landed(_max(self.lsn, other.lsn), max(self.batch, other.batch))


@dataclass(frozen=True)
class Table:
    """A tracked table as the project declares it (macro tracked_table): its channel, its
    capture instances (lower case, with whether each is declared dropped), a digest of its
    declaration (columns and options; the marts record the digest they were built with), the
    databases it reads ('' the default one) and whether it is a tenant table (its marts keyed by
    source_database too, one part of their window per database)."""

    name: str
    channel: str
    instances: tuple[tuple[str, bool], ...] = ()
    digest: str = ""
    databases: tuple[str, ...] = ("",)
    tenant: bool = False
    # a tenant table's declared captured columns: (instance, source name, type, ordinal), lower case
    captured: tuple[tuple[str, str, str, int], ...] = ()

    @property
    def staging(self) -> str:
        return f"stg_{self.channel}__{self.name}"

    @property
    def current(self) -> str:
        return f"{self.name}_current"

    @property
    def history(self) -> str:
        return f"{self.name}_history"

    @property
    def marts(self) -> tuple[str, str]:
        return (self.history, self.current)

    @property
    def sources(self) -> list[str]:
        """The landed sources its staging takes in, of every database it reads (keys of Facts.landed)."""
        return [s for db in self.databases for s in self.sources_in(db)]

    def sources_in(self, database: str) -> list[str]:
        """The landed sources of one of its databases."""
        if self.channel == "change_tables":
            keys = [f"change_tables/{i}" for i, _ in self.instances] + [f"snapshots/{self.name}"]
        else:
            keys = [f"{self.channel}:{self.name}"]
        return [dbkey(database, k) for k in keys]


@dataclass(frozen=True)
class Manifest:
    """An export manifest (docs/landing.md "Export manifests"): the LSN range (after_lsn exclusive,
    through_lsn inclusive) a capture instance's export covers, and the batch it landed in."""

    instance: str
    after_lsn: str | None
    through_lsn: str
    batch: str
    database: str = ""


@dataclass(frozen=True)
class Snapshot:
    """A landed snapshot of a change-table table (docs/landing.md "Snapshots") from one of its
    databases: the LSN it is consistent at and the batch it landed in."""

    table: str
    lsn: str
    batch: str
    database: str = ""


@dataclass(frozen=True)
class Watermark:
    """How far a model got: marts the LSN they applied up to (and, for event channels, the last
    landing batch they took in); staging the last batch it took in; declaration the digest of the
    table's declaration the model was last built with."""

    lsn: str | None = None
    batch: str | None = None
    declaration: str | None = None


@dataclass(frozen=True)
class PreviousRun:
    """The fields of the previous run's ledger row that the next plan continues from."""

    run_id: str
    landed: dict[str, Landed] = field(default_factory=dict)
    exported_lsn: dict[str, str | None] = field(default_factory=dict)  # by dbkey(database, capture instance)
    manifests_from: str = ""
    tables: dict[str, dict] = field(default_factory=dict)  # its summary rows, by dbkey(database, table)
    streams: dict[str, dict] = field(default_factory=dict)  # its event-stream rows, by channel
    # per database, the cleanup retention the last cdc_jobs export of it gave
    retentions: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class Facts:
    """What begin_run reports, the one schema of its report (report_keys; the module's docstring
    says what the plan makes of them)."""

    run_id: str  # the run's batch id (plan.batch_id), which its files landed with
    tables: tuple[Table, ...]  # the declared tracked tables
    previous: PreviousRun | None = None  # the previous run's ledger row; None before the first
    # records this run's batch landed per "[databases/<database>/]<kind>/<entity>" (the ledger's `landed`)
    landed_now: dict[str, int] = field(default_factory=dict)
    # per source, what landed in the batches after the previous run's (see Table.sources), each
    # keyed dbkey(database, ...): "change_tables/<instance>", "snapshots/<table>",
    # "cdc_metadata/<entity>", "ces", "debezium" (the channel's events of that database; the
    # default database's key also counts every line of the channel, whatever its database, for
    # the channel's last batch), "ces:<table>", "debezium:<table>" (the events routed to a table)
    arrived: dict[str, Landed] = field(default_factory=dict)
    # CES lines of those batches whose table cannot be told before their message is reassembled
    # (segments of a split message): every CES table may have new events (their last batch)
    ces_unrouted: str | None = None
    # per database, the last batch with a Debezium snapshot's end marker (it completes the
    # snapshot of every table of that database)
    debezium_snapshot_end: dict[str, str] = field(default_factory=dict)
    manifests: tuple[Manifest, ...] = ()
    snapshots: tuple[Snapshot, ...] = ()
    # each model's, by dbkey(database, model name): a mart's per database it applies ('' for the
    # default database), every other model's by its name
    watermarks: dict[str, Watermark] = field(default_factory=dict)
    relations: frozenset[str] = frozenset()  # the tables and views of the target schema
    # per dbkey(database, capture instance), the low end of its validity interval (cdc.change_tables.start_lsn)
    instance_min_lsn: dict[str, str] = field(default_factory=dict)
    # digest of the project's views (the quarantine view lists every staging model)
    views_digest: str = ""
    # each seed's relation and the checksum of its file (dbt's): a seed loads when its table is
    # missing or the checksum it was loaded with (its watermark's declaration) differs
    seeds: dict[str, Seed] = field(default_factory=dict)
    # whether any node of the project carries the tag cdc_audit (an incremental run leaves them out;
    # dbt warns of a selector that matches nothing, so none is passed then)
    audit_tagged: bool = False
    refused: tuple[str, ...] = ()
    # the refused files refused for another's sake (a manifest for its file, a file for its manifest)
    refused_for_another: tuple[str, ...] = ()
    waiting: tuple[dict, ...] = ()  # files that wait: {file, reason, wait} (runner/sources/landing.py WAITS)
    ignored: tuple[str, ...] = ()  # "<file>: <columns> not declared ..." per file landed with extra columns
    # per dbkey(database, change-table table), the smallest commit LSN of its staged changes of that
    # database whose lsn_time_mapping row landed in these batches for the first time, at or below
    # its marts' watermark there: they were applied without a commit time (begin_run's _late_commit_times)
    late_commit_times: dict[str, str] = field(default_factory=dict)
    # per database, the cleanup job's retention (minutes, as text) in the msdb.dbo.cdc_jobs rows
    # of it landed in these batches (cdc_metadata/cdc_jobs, job_type cleanup), the newest
    cdc_jobs_retention: dict[str, str] = field(default_factory=dict)
    # each database's name by its id ('': the default database's, '' when none is declared)
    database_names: dict[str, str] = field(default_factory=dict)
    # per dbkey(database, capture instance) of a tenant table, the columns its cdc.captured_columns
    # exports name (staged, or landed in these batches): source name -> (type, ordinal), lower case
    captured_columns: dict[str, dict[str, tuple[str, int]]] = field(default_factory=dict)

    def mark(self, model: str, database: str = "") -> Watermark:
        """A model's watermark (of one database, for a mart)."""
        return self.watermarks.get(dbkey(database, model), Watermark())

    def database_label(self, database: str) -> str:
        """How messages name a database: its declared name, else `the default database`."""
        return self.database_names.get(database) or database or "the default database"


@dataclass(frozen=True)
class Seed:
    relation: str
    checksum: str


@dataclass(frozen=True)
class Options:
    upper_lsn: str | None = None  # --upper-lsn, canonical
    full_refresh: bool = False  # --full-refresh: every mart rebuilt from what is staged
    restage: bool = False  # --restage: every staging table rebuilt from the raw table too (a full refresh)
    select: tuple[str, ...] = ()  # a dbt selection given by the user (--select)
    manifests_required: bool = False  # var cdc_export_manifests: required
    # files the runner's two listings found still being written (runner/sources/landing.py files_to_land)
    unsettled: tuple[str, ...] = ()


# ---- the plan ---------------------------------------------------------------------------------

@dataclass
class ExportCut:
    """The change-table cut export manifests allow (docs/landing.md "Export manifests"). exported:
    per capture instance with manifests, the LSN its exports reach without a gap; cut: the
    smallest that the declared tables' exports reach ('' when a table must wait for its first,
    None when no table has manifests); held_back: the table holding the cut below the capture
    high-water mark; without_manifest: declared instances without any; gaps: an export landed
    beyond a missing one; manifests_from: the batch of the earliest manifest waiting beyond a gap."""

    exported: dict[str, str | None] = field(default_factory=dict)
    manifests_from: str = ""
    cut: str | None = None
    held_back: dict | None = None
    without_manifest: list[str] = field(default_factory=list)
    gaps: list[str] = field(default_factory=list)


@dataclass
class DbWindow:
    """One database's part of a mart's window: the changes of that database above lower_lsn up to
    upper_lsn (event channels: those of the landing batches after lower_batch up to upper_batch,
    whatever their LSN, and every earlier event of the keys they touch); snapshot_lsn: a
    change-table snapshot of it that starts the window (reconcile: against the marts as stored,
    else it is the starting state). database: its id ('' the default one); name: its declared
    name, a tenant mart's source_database value."""

    database: str = ""
    name: str = ""
    lower_lsn: str = ""
    upper_lsn: str | None = None
    lower_batch: str = ""
    upper_batch: str | None = None
    snapshot_lsn: str | None = None
    reconcile: bool = False


@dataclass
class ModelWindow:
    """What a model of this run reads (the macro cdc_window returns it). Staging: the landing
    batches after from_batch up to through_batch (lower_lsn and upper_lsn: the LSN range of what
    arrived for the table, which its batch checks read, a tenant table's per database in `parts`;
    for the Debezium events model, that of its complete events, its replay check's floor:
    _replay_floor). A mart: `parts`, one DbWindow per
    database whose changes it applies (a full build: every database of the table); a table of one
    database has its part's bounds also as the window's own fields (lower_lsn ... reconcile), which
    its SQL reads; tenant: the table's marts are keyed by source_database (its SQL reads the parts);
    full: built from scratch (create or replace); evolve: the table's declaration changed since
    the mart was last built (its stored columns are looked up)."""

    kind: str  # staging | mart
    table: str | None = None
    full: bool = False
    from_batch: str = ""
    through_batch: str | None = None
    lower_lsn: str = ""
    upper_lsn: str | None = None
    lower_batch: str = ""
    upper_batch: str | None = None
    snapshot_lsn: str | None = None
    reconcile: bool = False
    evolve: bool = False
    tenant: bool = False
    parts: list[DbWindow] = field(default_factory=list)


def _mart_window(table: str, full: bool, evolve: bool, tenant: bool, parts: list[DbWindow]) -> ModelWindow:
    """A mart's window from its parts: a table of one database carries its part's bounds as its own."""
    window = ModelWindow("mart", table, full=full, evolve=evolve, tenant=tenant, parts=parts)
    if not tenant and len(parts) == 1:
        p = parts[0]
        window.lower_lsn, window.upper_lsn, window.lower_batch, window.upper_batch = (p.lower_lsn, p.upper_lsn,
                                                                                      p.lower_batch, p.upper_batch)
        window.snapshot_lsn, window.reconcile = p.snapshot_lsn, p.reconcile
    return window


@dataclass
class PartPlan:
    """A tracked table's decisions for one of its databases: apply (its marts have changes of it in
    their window), gap (why this database's changes stop instead), waits (change tables: why they
    wait this run without failing it: an export of theirs is still being written), late (change
    tables: the smallest commit LSN that arrived at or below the marts' watermark, which makes this
    run rebuild both marts from staging, see _late), latest_snapshot (change tables: the newest
    snapshot at or below the bound, where a plain dbt build that rebuilds the marts starts)."""

    apply: bool = False
    gap: str | None = None
    waits: str | None = None
    late: str | None = None
    latest_snapshot: str | None = None


@dataclass
class TablePlan:
    """A tracked table in this run: stage (its staging takes in new batches), and, over its
    databases (`databases`: their PartPlans), apply (any has changes in the marts' window), gap
    (why one is stopped), waits (why one waits), late, latest_snapshot (of its one database)."""

    name: str
    channel: str
    stage: bool = False
    apply: bool = False
    gap: str | None = None
    waits: str | None = None
    late: str | None = None
    latest_snapshot: str | None = None
    databases: dict[str, PartPlan] = field(default_factory=dict)

    def settle(self) -> None:
        """The table's own fields from its databases' (the first gap, wait and late of them)."""
        parts = [self.databases[d] for d in sorted(self.databases)]
        self.apply = any(p.apply for p in parts)
        self.gap = next((p.gap for p in parts if p.gap), None)
        self.waits = next((p.waits for p in parts if p.waits), None)
        self.late = next((p.late for p in parts if p.late), None)
        self.latest_snapshot = parts[0].latest_snapshot if len(parts) == 1 else None


@dataclass
class Plan:
    run_id: str
    since: str
    full_refresh: bool
    status: str  # build | nothing_to_do
    upper_lsn: dict[str, str | None]  # by dbkey(database, channel)
    upper_batch: dict[str, str | None]  # by event channel
    landed_lsn: dict[str, str | None]  # by dbkey(database, channel)
    landed: dict[str, Landed]
    export: dict[str, ExportCut]  # by database
    tables: dict[str, TablePlan]
    models: dict[str, ModelWindow]
    build: list[str]
    seeds: dict[str, str]  # the seeds to load (missing, or their file changed since loaded): their checksums
    stale_snapshots: list[str]
    select: tuple[str, ...] = ()
    # the digests the built views record
    views_digest: str = ""
    retention: dict[str, Retention] = field(default_factory=dict)  # by database

    @property
    def build_seeds(self) -> bool:
        return bool(self.seeds)

    @property
    def checks(self) -> str:
        return "all" if self.full_refresh else "batch"

    @property
    def exported(self) -> dict[str, str | None]:
        """Per dbkey(database, capture instance), where its exports reach (the ledger's exported_lsn)."""
        return {dbkey(db, i): lsn for db, cut in self.export.items() for i, lsn in cut.exported.items()}

    @property
    def manifests_from(self) -> str:
        """The batch of the earliest manifest waiting beyond a gap, of any database."""
        return min((c.manifests_from for c in self.export.values() if c.manifests_from), default="")

    def var(self) -> dict:
        """The plan as the models read it (var cdc_plan): the run, the checks' scope and each
        model's window."""
        return {"run_id": self.run_id, "since": self.since, "checks": self.checks,
                "models": {name: _window_json(w) for name, w in sorted(self.models.items())}}

    def to_json(self, outcome: Outcome | None = None) -> str:
        """What the ledger's `plan` column keeps: each table's decision, each model's window and,
        after the build (outcome), the windows a plain dbt build takes next (plain_windows)."""
        return json.dumps({"tables": {n: _table_json(t) for n, t in sorted(self.tables.items())},
                           "models": {n: _window_json(w) for n, w in sorted(self.models.items())},
                           "build": self.build, "plain": plain_windows(self, outcome) if outcome else {}},
                          sort_keys=True)


def _window_json(w: ModelWindow) -> dict:
    """A window as the models read it: a table of one database without its parts (its bounds are
    the window's own)."""
    d = _compact(asdict(w))
    if not w.tenant and len(w.parts) <= 1:
        d.pop("parts", None)
    else:
        d["parts"] = [_compact(p) for p in d.get("parts", [])]
    return d


def _table_json(t: TablePlan) -> dict:
    d = _compact(asdict(t))
    if list(t.databases) == [""]:
        d.pop("databases", None)
    elif "databases" in d:
        d["databases"] = {db: _compact(p) for db, p in d["databases"].items()}
    return d


DEFAULT_RETENTION_MINUTES = 4320  # sys.sp_cdc_add_job's default: three days


@dataclass(frozen=True)
class Retention:
    """How long SQL Server's cleanup job keeps changes (docs/operations.md "Retention headroom"):
    minutes, and the value a cdc_jobs export gave (None: the default, no export landed yet);
    problem: why a landed value was not taken."""

    minutes: int
    landed: int | None = None
    problem: str | None = None


def retention(facts: Facts, database: str = "") -> Retention:
    """A database's cleanup retention: the newest cdc_jobs export's (whole minutes, not
    negative), else the one an earlier run took from one, else three days. A value that is not a
    number of minutes keeps the previous one, with the reason."""
    before = facts.previous.retentions.get(database) if facts.previous else None
    kept = Retention(before if before is not None else DEFAULT_RETENTION_MINUTES, before)
    text = facts.cdc_jobs_retention.get(database)
    if text is None:
        return kept
    try:
        value = float(str(text).strip())
    except ValueError:
        value = -1.0
    if value < 0 or value != int(value):
        source = f"{kept.minutes} minutes" + (" (the default)" if before is None else "")
        where = f" of {facts.database_label(database)}" if database else ""
        return Retention(kept.minutes, kept.landed, f"cdc_jobs{where}: the cleanup job's retention '{text}' is not a whole "
                                                    f"number of minutes; keeping {source}")
    return Retention(int(value), int(value))


def _compact(d: dict) -> dict:
    return {k: v for k, v in d.items() if v not in (None, "", False, [], {})}


def _max(a: str | None, b: str | None) -> str | None:
    return b if a is None else a if b is None else max(a, b)


def lsn_increment(lsn: str) -> str | None:
    """sys.fn_cdc_increment_lsn on a canonical LSN (macro lsn_increment): +1 with carry."""
    return None if lsn == MAX_LSN else f"{int(lsn, 16) + 1:020X}"


def lsn_decrement(lsn: str) -> str | None:
    return None if int(lsn, 16) == 0 else f"{int(lsn, 16) - 1:020X}"


# ---- planning ---------------------------------------------------------------------------------

BATCH_STAMP = "%Y%m%dT%H%M%S%fZ"


def batch_id(clock_id: str, last_batch: str) -> str:
    """This run's batch id, which orders every batch after it (staging takes the batches after
    the last it took in; the plan, what landed after the previous run): the runner's clock id
    (e.g. 20261125T144641017837Z-a0c8d5) unless the last batch recorded or landed (macro
    open_run) is at or above it, e.g. after the clock stepped back; then one microsecond after
    that batch, with the clock id's suffix. So a clock that steps back changes nothing."""
    if clock_id > last_batch:
        return clock_id
    stamp = datetime.strptime(last_batch[:22], BATCH_STAMP) + timedelta(microseconds=1)
    return f"{stamp.strftime(BATCH_STAMP)}-{clock_id.split('-')[-1]}"


def landed_through(previous: PreviousRun | None, facts: Facts) -> dict[str, Landed]:
    """Per source, what has landed so far: the previous run's record raised by what arrived
    since. CES lines that route nowhere yet count for every CES table (of every database), a
    Debezium snapshot's end marker of a database for every Debezium table of it."""
    landed = dict(previous.landed) if previous else {}
    arrived = dict(facts.arrived)
    for t in facts.tables:
        for db in t.databases:
            key = dbkey(db, f"{t.channel}:{t.name}")
            if t.channel == "ces" and facts.ces_unrouted:
                arrived[key] = Landed(None, facts.ces_unrouted).merge(arrived.get(key))
            if t.channel == "debezium" and facts.debezium_snapshot_end.get(db):
                arrived[key] = Landed(None, facts.debezium_snapshot_end[db]).merge(arrived.get(key))
    for key, value in arrived.items():
        landed[key] = value.merge(landed.get(key))
    return landed


def export_cut(tables: tuple[Table, ...], manifests: tuple[Manifest, ...], exported: dict[str, str | None],
               captured: str | None, required: bool) -> ExportCut:
    """The change-table cut export manifests allow (see ExportCut), in one database: `tables` the
    tables that read it, `manifests` and `exported` (by capture instance) its own. A manifest
    continues its instance's chain when its after_lsn is at or below the LSN reached (the first
    one starts it). A table's exports reach the smallest LSN of its instances with manifests that
    are not declared dropped (while two run side by side, each holds the changes only it
    captures), else the largest of its dropped ones'; a table with none follows the mapping alone
    (optional) or holds the cut where its exports reach: nowhere until its first lands (required)."""
    exported = dict(exported)
    by_instance: dict[str, list[Manifest]] = {}
    for m in sorted(manifests, key=lambda m: (m.instance, m.after_lsn or "", m.through_lsn)):
        by_instance.setdefault(m.instance, []).append(m)
    pending, gaps = [], []
    for instance, found in by_instance.items():
        reached = exported.get(instance)
        for _ in found:  # each pass takes every manifest that continues the chain
            for m in found:
                if m.through_lsn > (reached or "") and (reached is None or m.after_lsn is None or m.after_lsn <= reached):
                    reached = m.through_lsn
        exported[instance] = reached
        beyond = [m for m in found if m.through_lsn > (reached or "")]
        pending += [m.batch for m in beyond]
        if beyond:
            gaps.append(f"{instance}: exported through 0x{reached}, the next landed export starts after 0x{beyond[0].after_lsn}")
    result = ExportCut(exported=exported, manifests_from=min(pending) if pending else "", gaps=gaps)
    cut_table = cut_instance = None
    for t in sorted((t for t in tables if t.channel == "change_tables"), key=lambda t: t.name):
        reached, laggard = _table_exported(t, exported)
        if reached is None and not required:
            result.without_manifest.append(t.instances[-1][0])
            continue
        if result.cut is None or (reached or "") < result.cut:
            result.cut, cut_table, cut_instance = reached or "", t.name, laggard
    if result.cut is not None and captured and result.cut < captured:
        # '' (required, not exported yet): no change-table mart takes anything
        result.held_back = {"table": cut_table, "capture_instance": cut_instance, "exported_lsn": result.cut,
                            "captured_lsn": captured}
    return result


def _table_exported(t: Table, exported: dict[str, str | None]) -> tuple[str | None, str]:
    """How far a change-table table's exports reach, and the capture instance that reaches only
    that far (see export_cut)."""
    active = [(exported[i], i) for i, dropped in t.instances if exported.get(i) is not None and not dropped]
    dropped = [(exported[i], i) for i, d in t.instances if exported.get(i) is not None and d]
    if active:
        return min(active)
    if dropped:
        return max(dropped)[0], t.instances[-1][0]
    return None, t.instances[-1][0]


def _replay_floor(window: ModelWindow, arrived: list[Landed], since: str) -> None:
    """The Debezium events model looks a replay up among the events it staged before at or above
    the smallest commit LSN of the complete events it takes in (its floor). begin_run decoded the
    lines landed after the previous run to read them, and their smallest commit LSN is that floor
    when the model takes in no earlier batch: the window carries it (lower_lsn, upper_lsn) and the
    model does not decode its lines a second time to find it. Otherwise (its last batch is older
    than the previous run's, no complete event arrived, a full build) the model queries it. With
    events of several databases the floor is the smallest of theirs: a replay repeats its change's
    LSN, which is at or above its own database's smallest and so above the floor, whatever the
    other databases' LSNs (they only add staged rows to look through). arrived: each database's."""
    lows = [a.min_lsn for a in arrived if a.min_lsn]
    if not window.full and window.from_batch >= since and lows:
        window.lower_lsn, window.upper_lsn = min(lows), max(a.lsn for a in arrived if a.lsn)


def _databases(facts: Facts) -> list[str]:
    """Every database a declared table reads, the default one first."""
    return sorted({db for t in facts.tables for db in t.databases})


def plan_run(facts: Facts, options: Options = Options()) -> Plan:
    previous = facts.previous
    since = previous.run_id if previous else ""
    landed = landed_through(previous, facts)
    databases = _databases(facts)
    landed_lsn = {dbkey(db, ch): _lsn(landed, dbkey(db, MAPPING if ch == "change_tables" else ch))
                  for db in databases for ch in CHANNELS}
    upper_batch = {ch: (landed[ch].batch if ch in landed else None) for ch in EVENT_CHANNELS}
    exported = previous.exported_lsn if previous else {}
    export = {db: export_cut(tuple(t for t in facts.tables if db in t.databases),
                             tuple(m for m in facts.manifests if m.database == db),
                             {i: lsn for k, lsn in exported.items() for d, i in [split_dbkey(k)] if d == db},
                             landed_lsn[dbkey(db, "change_tables")], options.manifests_required)
              for db in databases}
    upper = {key: options.upper_lsn for key in landed_lsn} if options.upper_lsn else dict(landed_lsn)
    for db, cut in export.items():
        key = dbkey(db, "change_tables")
        if cut.cut is not None and upper[key] and cut.cut < upper[key]:
            upper[key] = cut.cut or None
    full = options.full_refresh or options.restage
    models: dict[str, ModelWindow] = {}
    tables: dict[str, TablePlan] = {}
    build: list[str] = []
    stored = _by_model(facts)

    def stale(model: str, sources: list[str]) -> bool:
        """A staging model builds when it does not exist, on a restage, or when one of its sources
        landed after the last batch it took in. A full refresh alone rebuilds the marts from what
        is staged: staging is a function of the landed rows, kept current batch by batch."""
        mark = facts.mark(model)
        newest = max((landed[s].batch for s in sources if s in landed), default=None)
        return options.restage or model not in facts.relations or (newest is not None and newest > (mark.batch or ""))

    def stage(model: str, sources: list[str], table: str | None = None, declaration: str | None = None) -> bool:
        mark = facts.mark(model)
        rebuild = options.restage or model not in facts.relations
        took_in = stale(model, sources)
        # a staging model with nothing new (built anyway by a full refresh) takes in no batch: its
        # build is a no-op, or only adds a newly declared column
        models[model] = ModelWindow("staging", table=table, full=rebuild, from_batch="" if rebuild else (mark.batch or ""),
                                    through_batch=facts.run_id if took_in else (mark.batch or ""),
                                    evolve=not rebuild and declaration is not None and mark.declaration != declaration)
        if took_in:
            build.append(model)
        return took_in

    for model, sources in METADATA_MODELS.items():
        stage(model, [dbkey(db, s) for db in databases for s in sources])
    channels = {t.channel for t in facts.tables}
    for channel, model in EVENT_MODELS.items():
        if channel in channels and stage(model, [channel, *(dbkey(db, channel) for db in databases if db)]) \
                and channel == "debezium":
            _replay_floor(models[model], [a for db in databases if (a := facts.arrived.get(dbkey(db, channel)))], since)
    for t in sorted(facts.tables, key=lambda t: t.name):
        plan = tables[t.name] = TablePlan(t.name, t.channel)
        plan.stage = stage(t.staging, t.sources, t.name, t.digest)
        # the LSN range of what arrived for the table: its batch checks read the staged rows in it
        # (a tenant table's, per database: LSNs of two do not compare)
        for db in t.databases:
            arrived = [facts.arrived[s] for s in t.sources_in(db) if s in facts.arrived and facts.arrived[s].lsn]
            if arrived:
                models[t.staging].parts.append(DbWindow(db, facts.database_names.get(db, db),
                                                        lower_lsn=min(a.min_lsn or a.lsn for a in arrived),
                                                        upper_lsn=max(a.lsn for a in arrived)))
        if models[t.staging].parts and not t.tenant:
            only = models[t.staging].parts.pop()
            models[t.staging].lower_lsn, models[t.staging].upper_lsn = only.lower_lsn, only.upper_lsn
        models[t.staging].tenant = t.tenant
        _plan_marts(t, plan, facts, landed, upper, upper_batch, full, models, options.unsettled, stored)
        if plan.apply:
            build += list(t.marts)
    views_changed = any(v not in facts.relations for v in VIEWS) or any(
        facts.mark(v).declaration != facts.views_digest for v in VIEWS)
    if views_changed or full:
        build += list(VIEWS)
    stale_snapshots = [
        f"{s.table}{_in(facts, s.database)}: the snapshot at 0x{s.lsn} is at or below its marts' watermark 0x{mark}, "
        "so it is never applied; land one taken later"
        for s in facts.snapshots if s.batch > since and (mark := _higher_watermark(facts, s.table, s.database))
        and s.lsn <= mark]
    arrived = bool(facts.arrived) or bool(facts.landed_now)
    moves = any(_advances(t, db, tables[t.name], facts, upper, upper_batch) for t in facts.tables for db in t.databases)
    # the seeds only document the vocabulary and feed data tests: loaded when missing or changed,
    # not on every full refresh
    seeds = {name: seed.checksum for name, seed in sorted(facts.seeds.items())
             if seed.relation not in facts.relations or facts.mark(name).declaration != seed.checksum}
    nothing = not (full or options.select) and not arrived and not build and not moves and not seeds
    return Plan(
        run_id=facts.run_id, since=since, full_refresh=full, status="nothing_to_do" if nothing else "build",
        upper_lsn=upper, upper_batch=upper_batch, landed_lsn=landed_lsn, landed=landed, export=export, tables=tables,
        models=models, build=build, seeds=seeds, stale_snapshots=stale_snapshots,
        select=tuple(options.select), views_digest=facts.views_digest,
        retention={db: retention(facts, db) for db in databases})


def _by_model(facts: Facts) -> dict[str, dict[str, Watermark]]:
    """Every watermark by its model, then its database."""
    found: dict[str, dict[str, Watermark]] = {}
    for key, mark in facts.watermarks.items():
        db, model = split_dbkey(key)
        found.setdefault(model, {})[db] = mark
    return found


def _in(facts: Facts, database: str) -> str:
    """` in <database>` for a named database (messages of a one-database project stay as they were)."""
    return f" in {facts.database_label(database)}" if database else ""


@dataclass(frozen=True)
class BuildCommand:
    """The run's `dbt build` (runner/run/dbt.py Dbt.build's arguments)."""

    select: tuple[str, ...]  # empty: the whole project
    exclude: tuple[str, ...]
    full_refresh: bool
    populate_cache: bool  # whether dbt lists the schema's relations first


def dbt_build(plan: Plan, facts: Facts) -> BuildCommand | None:
    """The run's dbt build, or None when there is none: nothing to do, or no table with changes in
    its window, no model and no seed due. With --select or a full refresh, what the user chose (a
    full refresh: the whole project); otherwise the plan's models and the seeds due. An incremental
    run checks what it changed (the audit tests, tag cdc_audit, left out when there are any), a
    full refresh audits whole tables (docs/operations.md "Checks: batch and audit"); both leave out the seeds already
    loaded and unchanged. dbt's own materializations (seeds, views) look relations up in its cache;
    the project's (staging, marts) never do, so a build of those only skips listing the schema."""
    chosen = bool(plan.select or plan.full_refresh)
    if plan.status == "nothing_to_do" or not (chosen or plan.build or plan.seeds):
        return None
    return BuildCommand(
        select=tuple(plan.select) if chosen else (*plan.build, *plan.seeds),
        exclude=(*(() if plan.full_refresh or not facts.audit_tagged else ("tag:cdc_audit",)),
                 *(() if plan.select else sorted(set(facts.seeds) - set(plan.seeds)))),
        full_refresh=plan.full_refresh,
        populate_cache=chosen or bool(plan.seeds) or bool(set(plan.build) & set(VIEWS)))


def _lsn(landed: dict[str, Landed], key: str) -> str | None:
    return landed[key].lsn if key in landed else None


def _higher_watermark(facts: Facts, table: str, database: str = "") -> str | None:
    marks = [facts.mark(m, database).lsn for m in (f"{table}_current", f"{table}_history") if facts.mark(m, database).lsn]
    return max(marks) if marks else None


def _reshaped(t: Table, stored: dict[str, dict[str, Watermark]]) -> bool:
    """Whether a table's marts were built in another shape, which a rebuild puts right: a tenant
    table's marts built for a table of one database or the other way round (the digest they
    recorded is `tenant:`-prefixed for a tenant table), or a table of one database's marts built
    from another database's changes (watermarks of theirs there, none in its own). stored: each
    model's watermarks by database."""
    marks = [(db, mark) for m in t.marts for db, mark in stored.get(m, {}).items()]
    if any(mark.declaration.startswith("tenant:") != t.tenant for _, mark in marks if mark.declaration):
        return True
    applied = {db for db, mark in marks if mark.lsn or mark.batch}
    return not t.tenant and bool(applied) and t.databases[0] not in applied


def _plan_marts(t: Table, plan: TablePlan, facts: Facts, landed: dict[str, Landed], upper: dict, upper_batch: dict,
                full: bool, models: dict[str, ModelWindow], unsettled: tuple[str, ...] = (),
                stored: dict[str, dict[str, Watermark]] | None = None) -> None:
    """Both marts' windows and whether the table applies anything, per database it reads (see the
    module's docstring). Either both marts are rebuilt from scratch (a full refresh, one of them
    does not exist, their shape changed: _reshaped, or changes of one database arrived below its
    watermark) or each applies, per database, the changes above its own watermark there.
    stored: each model's watermarks by database (every watermark's, by its model)."""
    stored = stored if stored is not None else _by_model(facts)
    marks = {db: {m: facts.mark(m, db) for m in t.marts} for db in t.databases}
    rebuild = full or any(m not in facts.relations for m in t.marts) or _reshaped(t, stored)
    evolve = any(mark.declaration != t.digest for db in t.databases for mark in marks[db].values() if mark.lsn or mark.batch)
    parts = {db: PartPlan() for db in t.databases}
    plan.databases = parts
    if t.channel == "change_tables" and not rebuild:
        for db in t.databases:
            parts[db].late = _late(t, db, facts, marks[db])
        rebuild = any(p.late for p in parts.values())
    windows: dict[str, list[DbWindow]] = {m: [] for m in t.marts}
    for db in t.databases:
        part, top, name = parts[db], upper[dbkey(db, t.channel)], facts.database_names.get(db, db)
        if t.channel == "change_tables":
            snapshot, reconcile = _snapshot(t, db, facts, top, marks[db], rebuild)
            part.latest_snapshot = max((s.lsn for s in facts.snapshots if s.table == t.name and s.database == db
                                        and top and s.lsn <= top), default=None)
            part_windows = {m: DbWindow(db, name, lower_lsn=snapshot or ("" if rebuild else (marks[db][m].lsn or "")),
                                        upper_lsn=top, snapshot_lsn=snapshot, reconcile=reconcile) for m in t.marts}
            newest = max((landed[s].lsn for s in t.sources_in(db) if s in landed and landed[s].lsn), default=None)
            lowest = min(w.lower_lsn for w in part_windows.values())
            part.apply = rebuild or snapshot is not None or bool(top and lowest < top and newest and newest > lowest)
            if not rebuild and lowest and top and lowest < top:
                # checked whenever the marts would move, changes landed or not: cleanup may have
                # removed changes that were never exported
                part.gap = _gap(t, db, lowest, facts)
            part.gap = part.gap or _held(t, db, facts) or _captured_otherwise(t, db, facts)
            part.waits = None if part.gap or rebuild else _still_written(t, db, unsettled)
            part.apply = part.apply and part.gap is None and part.waits is None
        else:
            top_batch = upper_batch[t.channel]
            part_windows = {m: DbWindow(db, name, upper_lsn=top, upper_batch=top_batch,
                                        lower_lsn="" if rebuild else (marks[db][m].lsn or ""),
                                        lower_batch="" if rebuild else (marks[db][m].batch or "")) for m in t.marts}
            newest = max((landed[s].batch for s in t.sources_in(db) if s in landed), default=None)
            lowest = min(w.lower_batch for w in part_windows.values())
            part.apply = rebuild or bool(top and newest and newest > lowest)
        for m in t.marts:
            # a table of one database keeps its window's bounds (its SQL reads them, an empty window
            # builds nothing); a tenant table's window has the parts that apply (all on a rebuild)
            if rebuild or part.apply or not t.tenant:
                windows[m].append(part_windows[m])
    for m in t.marts:
        models[m] = _mart_window(t.name, rebuild, evolve and not rebuild, t.tenant, windows[m])
    plan.settle()


def _late(t: Table, database: str, facts: Facts, marks: dict[str, Watermark]) -> str | None:
    """The smallest commit LSN of change rows of one database that arrived for a change-table
    table at or below its marts' watermark there (an export landed after the marts moved past its
    LSNs: a corrected re-export, an export later than its lsn_time_mapping, rows landed twice), or
    of its changes whose lsn_time_mapping row came only now (applied without a commit time), or
    None. The marts read only changes above their watermark, so such rows are applied (and commit
    times filled) by rebuilding the marts from staging, which holds every landed change
    (duplicates quarantined)."""
    lowest = min((marks[m].lsn or "" for m in t.marts), default="")
    lows = [facts.arrived[s].min_lsn for s in t.sources_in(database)
            if split_dbkey(s)[1].startswith("change_tables/") and s in facts.arrived and facts.arrived[s].min_lsn]
    timed = facts.late_commit_times.get(dbkey(database, t.name))
    late = min(lows + ([timed] if timed else []), default=None)
    return late if late and lowest and late <= lowest else None


def _snapshot(t: Table, database: str, facts: Facts, top: str | None, marks: dict[str, Watermark],
              rebuild: bool) -> tuple[str | None, bool]:
    """The snapshot of one database that starts a change-table table's window there, and whether
    it reconciles the marts (docs/landing.md "Snapshots"): on a rebuild the newest snapshot at or
    below the bound is the starting state; otherwise the newest one above both marts' watermarks
    reconciles what they hold (what is below it is never read)."""
    below = sorted(s.lsn for s in facts.snapshots if s.table == t.name and s.database == database and top and s.lsn <= top)
    if not below:
        return None, False
    if rebuild:
        return below[-1], False
    higher = max((marks[m].lsn or "" for m in t.marts), default="")
    return (below[-1], True) if all(marks[m].lsn for m in t.marts) and below[-1] > higher else (None, False)


def _gap(t: Table, database: str, lower: str, facts: Facts) -> str | None:
    """Why a change-table table cannot apply its window in one database: cleanup already removed
    changes above its marts' watermark there from every capture instance (the earliest LSN any of
    them still holds is beyond the next one needed)."""
    lows = [facts.instance_min_lsn[k] for i, _ in t.instances if (k := dbkey(database, i)) in facts.instance_min_lsn]
    if len(lows) < len(t.instances) or not lows:
        return None
    available, needed = min(lows), lsn_increment(lower)
    if needed is None or needed >= available:
        return None
    names = " / ".join(i for i, _ in t.instances)
    removed = lsn_decrement(available)
    where = _in(facts, database)
    return (f"gap detected for tracked table {t.name}{where}: its marts need changes from LSN {needed} but capture "
            f"instance {names}{where} now starts at {available}; changes {needed} to {removed} were removed by cleanup "
            f"before they were processed. Land a snapshot of {t.name}{_from(facts, database)} taken at or after LSN "
            f"{removed} (docs/landing.md \"Snapshots\"): it reconciles the marts and keeps their history")


def _from(facts: Facts, database: str) -> str:
    """` from <database> (databases/<database>/snapshots/)`-style pointer to a named database's folder."""
    return f" from {facts.database_label(database)} (in {dbkey(database, 'snapshots')}/)" if database else ""


def _folder_of(path: str) -> str:
    """The landing folder of a file's owner: `[databases/<database>/]<kind>/<entity>`, lower case."""
    parts = path.lower().split("/")
    return "/".join(parts[:4] if parts[0] == DATABASES else parts[:2])


def _held(t: Table, database: str, facts: Facts) -> str | None:
    """Why a change-table table waits in one database for a refused export of one of its capture
    instances there (`refused`: "<path>: <reason>" per refused file): were its marts to move past
    the LSNs the file holds, its changes would never be applied once a whole copy lands. Names a
    file refused for its own reason (its REFUSED line says the remedy), before those refused for
    another's sake (`for_another`: a manifest for its file, a file for its manifest)."""
    folders = {dbkey(database, f"change_tables/{i}") for i, _ in t.instances}
    mine = sorted((path in facts.refused_for_another, path) for path, _, _ in (r.partition(": ") for r in facts.refused)
                  if _folder_of(path) in folders)
    if not mine:
        return None
    more = f" (and {len(mine) - 1} more)" if len(mine) > 1 else ""
    return (f"tracked table {t.name}{_in(facts, database)} waits: {mine[0][1]}{more} was refused (its REFUSED line above "
            "says why and what to do), and its marts must not move past the changes it holds. Remedy it as that line says, "
            "or remove it to go on without it")


# SQL Server's cdc.captured_columns names some types otherwise than the change table holds them
CAPTURED_AS = {"timestamp": "binary", "rowversion": "binary", "sysname": "nvarchar"}


def _captured_otherwise(t: Table, database: str, facts: Facts) -> str | None:
    """Why a tenant table waits in one database: that database's cdc.captured_columns (when
    landed) does not capture the declared columns of one of its capture instances as the shared
    declaration says: a column missing, at another ordinal (its update-mask bit), or of another
    type. Its changes would be staged and applied under the other databases' declaration."""
    if not t.tenant:
        return None
    for instance, column, declared_type, ordinal in t.captured:
        landed = facts.captured_columns.get(dbkey(database, instance))
        if not landed:
            continue
        found = landed.get(column)
        base = declared_type.split("(")[0]
        problem = (f"does not capture column {column}" if found is None
                   else f"captures column {column} at ordinal {found[1]}, not {ordinal}" if found[1] != ordinal
                   else f"captures column {column} as {found[0]}, not {base}"
                   if found[0] and CAPTURED_AS.get(found[0], found[0]) != CAPTURED_AS.get(base, base) else None)
        if problem:
            return (f"tracked table {t.name}{_in(facts, database)} waits: capture instance {instance} of "
                    f"{facts.database_label(database)} {problem} (its cdc.captured_columns), so its changes cannot be "
                    "applied under the table's shared declaration. Declare that database's table apart (database: "
                    f"{facts.database_label(database)}) and take it out of databases, or make its capture match; the "
                    "other databases go on")
    return None


def _still_written(t: Table, database: str, unsettled: tuple[str, ...]) -> str | None:
    """Why a change-table table waits this run in one database: an export of one of its capture
    instances there is still being written (`unsettled`: paths under the landing folder)."""
    folders = {dbkey(database, f"change_tables/{i}") for i, _ in t.instances}
    files = sorted(f for f in unsettled if _folder_of(f) in folders)
    if not files:
        return None
    return (f"{t.name} waits: {files[0]}{f' (and {len(files) - 1} more)' if len(files) > 1 else ''} is still being "
            "written; its marts stay where they are until it lands")


def _advances(t: Table, database: str, plan: TablePlan, facts: Facts, upper: dict, upper_batch: dict) -> bool:
    """Whether a table with nothing to apply in one database still moves its marts' watermarks
    there to the bound."""
    part = plan.databases.get(database, PartPlan())
    return any(_moved(facts.mark(m, database), dbkey(database, t.channel), upper, upper_batch) for m in t.marts) \
        and not part.apply and part.gap is None and part.waits is None


def _moved(mark: Watermark, key: str, upper: dict, upper_batch: dict) -> bool:
    """Whether a watermark is below its bound (key: dbkey(database, channel))."""
    top, channel = upper[key], split_dbkey(key)[1]
    if top and (mark.lsn or "") < top:
        return True
    return channel in EVENT_CHANNELS and bool(upper_batch[channel]) and (mark.batch or "") < upper_batch[channel]


# ---- after the build ----------------------------------------------------------------------------

@dataclass(frozen=True)
class NodeResult:
    """One node of dbt's run results: name (a model's, or the test's), resource type, status
    (success, error, fail, pass, warn, skipped), the models it depends on, the first line of its
    message, its seconds and the seconds of each SQL statement it sent."""

    name: str
    resource_type: str
    status: str
    depends_on: tuple[str, ...] = ()
    message: str = ""
    seconds: float = 0.0
    statements: tuple[float, ...] = ()


@dataclass
class Outcome:
    status: str  # succeeded | failed | nothing_to_do
    watermarks: dict[str, Watermark]  # every model's, after the run (by dbkey, as Facts.watermarks)
    # per mart and database, dbkey(database, mart): at its window's bound after the run (not held back by a failure)
    advanced: dict[str, bool]
    failed: list[str]  # "<type> <name>: <status>[ - reason]", gaps included
    built: set[str] = field(default_factory=set)  # the models that built successfully


def advance(plan: Plan, facts: Facts, results: list[NodeResult]) -> Outcome:
    """The watermarks after the build and the run's status. A staging model that built records
    this run's batch. A mart that built, and no test of which failed, records each part's bound
    (per database); a database the mart's window left out because nothing of it was in the window
    moves to its bound too (unless the user's --select chose what to build), as do the marts the
    plan left out because their table had nothing in the window; anything else keeps its
    watermark, so the next run applies the same changes again (the marts are idempotent over a
    window). A table stopped at a gap (in any database) fails the run."""
    built = {r.name: r for r in results if r.resource_type in ("model", "seed")}
    failed = [f"{r.resource_type} {r.name}: {r.status}" + (f" - {r.message}" if r.message else "")
              for r in results if r.status in ("error", "fail")]
    blocked = {m for r in results if r.resource_type == "test" and r.status in ("error", "fail") for m in r.depends_on}
    marks = dict(facts.watermarks)
    advanced: dict[str, bool] = {}
    by_table = {t.name: t for t in facts.tables}
    for model, window in plan.models.items():
        result = built.get(model)
        ok = result is not None and result.status == "success"
        if window.kind == "staging":
            if ok:
                table = by_table.get(window.table)
                marks[model] = Watermark(batch=plan.run_id, declaration=table.digest if table else None)
            continue
        t = by_table[window.table]
        tp = plan.tables[t.name]
        if ok and model not in blocked:
            declaration = t.digest
        elif result is None and not plan.select and not window.full and not tp.apply:
            declaration = None  # nothing in its window: each database at its bound once its watermark is
        else:
            advanced.update({dbkey(db, model): False for db in t.databases})
            continue
        parts = {p.database: p for p in window.parts}
        top_batch = plan.upper_batch.get(t.channel) if t.channel in EVENT_CHANNELS else None
        for db in t.databases:
            key, part = dbkey(db, model), tp.databases.get(db, PartPlan())
            old, p = marks.get(key, Watermark()), parts.get(db)
            if p is not None and declaration is not None:
                if window.full:  # rebuilt from scratch: it holds exactly what its window reached
                    marks[key] = Watermark(p.upper_lsn, p.upper_batch, declaration)
                else:
                    marks[key] = Watermark(_max(old.lsn, p.upper_lsn), _max(old.batch, p.upper_batch), declaration)
            elif part.gap or part.waits or (plan.select and declaration is None):
                advanced[key] = False
                continue
            elif _moved(old, dbkey(db, t.channel), plan.upper_lsn, plan.upper_batch):
                marks[key] = Watermark(_max(old.lsn, plan.upper_lsn[dbkey(db, t.channel)]), _max(old.batch, top_batch),
                                       declaration or old.declaration)
            advanced[key] = True
    for view in VIEWS:
        if built.get(view) is not None and built[view].status == "success":
            marks[view] = Watermark(batch=plan.run_id, declaration=plan.views_digest)
    for seed, checksum in plan.seeds.items():
        if built.get(seed) is not None and built[seed].status == "success":
            marks[seed] = Watermark(batch=plan.run_id, declaration=checksum)
    failed += [f"table {name}: {part.gap}" for name, tp in sorted(plan.tables.items())
               for _, part in sorted(tp.databases.items()) if part.gap]
    status = "nothing_to_do" if plan.status == "nothing_to_do" else ("failed" if failed else "succeeded")
    return Outcome(status=status, watermarks=marks, advanced=advanced, failed=failed,
                   built={name for name, r in built.items() if r.status == "success"})


def plain_windows(plan: Plan, outcome: Outcome) -> dict[str, dict[str, dict]]:
    """Per mart, the windows a plain `dbt build` takes after this run (the ledger's plan keeps
    them; the macro cdc_window reads them, docs/marts.md "Watermarks and windows"): `remaining`,
    what this run planned for the mart and did not apply (per database, its part of the window,
    unless the mart is at that part's bound after the run: then nothing, an empty part there), and
    `full`, a rebuild from scratch up to the window's bounds (a change-table mart, per database,
    from the newest snapshot at or below its bound, which starts it). Both look the stored columns
    up (evolve): a plain build does not know the declaration the mart was built with. A plain
    build records no mart watermark: the runner's next run applies its window again, with the
    same result (the marts are idempotent over a window)."""
    windows: dict[str, dict[str, dict]] = {}
    for name, w in sorted(plan.models.items()):
        if w.kind != "mart":
            continue
        tp = plan.tables[w.table]
        remaining, full = [], []
        for p in w.parts:
            key = dbkey(p.database, name)
            if outcome.advanced.get(key):
                mark = outcome.watermarks.get(key, Watermark())
                remaining.append(DbWindow(p.database, p.name, lower_lsn=mark.lsn or "", upper_lsn=mark.lsn,
                                          lower_batch=mark.batch or "", upper_batch=mark.batch))
            else:
                remaining.append(p)
            latest = tp.databases.get(p.database, PartPlan()).latest_snapshot
            snapshot = latest if latest and p.upper_lsn and latest <= p.upper_lsn else None
            full.append(DbWindow(p.database, p.name, lower_lsn=snapshot or "", upper_lsn=p.upper_lsn,
                                 upper_batch=p.upper_batch, snapshot_lsn=snapshot))
        windows[name] = {"remaining": {"full": False, **_window_json(_mart_window(w.table, False, True, w.tenant, remaining))},
                         "full": _window_json(_mart_window(w.table, True, True, w.tenant, full))}
    return windows


# ---- reading the facts -------------------------------------------------------------------------

def _previous(row: dict, landed) -> PreviousRun:
    """The previous run's ledger row, as begin_run reads it (its landed_through as `landed`;
    tables and streams the ledger's arrays of rows). A row of an earlier release has no
    landed_through: its channels' high-water marks stand in for it; nor retentions: its
    retention_minutes is the default database's."""
    through = landed(row.get("landed"))
    if not through:
        lsns, batches = row.get("landed_lsn") or {}, row.get("upper_batch") or {}
        old = {"cdc_metadata/lsn_time_mapping": "change_tables", "ces": "ces", "debezium": "debezium"}
        through = {key: Landed(lsns.get(channel), batches.get(channel) or "") for key, channel in old.items()
                   if lsns.get(channel)}
    retentions = {db: int(minutes) for db, minutes in (row.get("retentions") or {}).items() if minutes is not None}
    if not retentions and row.get("retention_minutes") is not None:
        retentions = {"": int(row["retention_minutes"])}
    return PreviousRun(row["run_id"], through, dict(row.get("exported_lsn") or {}), row.get("manifests_from") or "",
                       {dbkey(t.get("source_database") or "", t["tracked_table"]): t for t in row.get("tables") or []},
                       {s["channel"]: s for s in row.get("streams") or []}, retentions)


# the facts the runner decides itself, before begin_run: what of the landing folder lands
# (runner/sources/landing.py Intake.facts)
INTAKE_FACTS = ("refused", "refused_for_another", "waiting", "ignored")
# the facts read from begin_run's event_arrivals (see event_arrivals), which it reports instead
EVENT_FACTS = ("ces_unrouted", "debezium_snapshot_end")


def report_keys() -> frozenset[str]:
    """The keys of begin_run's report, the one schema of it: Facts' fields but INTAKE_FACTS and
    EVENT_FACTS, and event_arrivals."""
    return frozenset(f.name for f in fields(Facts)) - frozenset(INTAKE_FACTS + EVENT_FACTS) | {"event_arrivals"}


def event_arrivals(rows: list[list]) -> dict[str, object]:
    """The event channels' part of the facts, from begin_run's event_arrivals: the event lines
    landed since the previous run grouped as [channel, database, route, complete, snapshot_end,
    lsn, batch, records, min_lsn] (database: the id of the declared database the event comes from,
    '' the default one, None for none; route: the tracked table the lines route to, '?' for CES
    segments whose message is not reassembled yet, None for none; complete: trusted events with an
    LSN). Returns {arrived, ces_unrouted, debezium_snapshot_end}: arrived has the channel's key
    (every line's batch; the lsn and min_lsn of the default database's complete events),
    dbkey(database, channel) (another database's complete events: lsn and min_lsn, the replay
    check's floor, see _replay_floor) and per table and database, dbkey(database,
    "<channel>:<table>"), its complete events; ces_unrouted, the last batch with an unrouted CES
    segment (every CES table may have new events); debezium_snapshot_end, per database the last
    batch with a Debezium snapshot's end marker (it completes the snapshot of every table there)."""
    arrived: dict[str, dict] = {}
    unrouted: str | None = None
    ended: dict[str, str] = {}

    def add(key: str, lsn: str | None, min_lsn: str | None, batch: str, records: int) -> None:
        seen = arrived.setdefault(key, {"lsn": None, "min_lsn": None, "batch": "", "records": 0})
        seen["lsn"] = _max(seen["lsn"], lsn)
        seen["min_lsn"] = min(x for x in (seen["min_lsn"], min_lsn) if x) if seen["min_lsn"] or min_lsn else None
        seen["batch"], seen["records"] = max(seen["batch"], batch), seen["records"] + int(records)

    for channel, database, route, complete, snapshot_end, lsn, batch, records, min_lsn in rows:
        known = database is not None
        db = database or ""
        add(channel, lsn if complete and known and not db else None, min_lsn if complete and known and not db else None,
            batch, records)
        if db and known:
            add(dbkey(db, channel), lsn if complete else None, min_lsn if complete else None, batch, records)
        if route == "?":
            unrouted = max(unrouted or "", batch)
        elif route and complete and known:
            add(dbkey(db, f"{channel}:{route}"), lsn, min_lsn, batch, records)
        if snapshot_end and known:
            ended[db] = max(ended.get(db, ""), batch)
    return {"arrived": arrived, "ces_unrouted": unrouted, "debezium_snapshot_end": ended}


def facts_from_report(report: dict, intake: dict | None = None) -> Facts:
    """Facts from what the macro begin_run reports (JSON) and the runner's intake (INTAKE_FACTS);
    raises ValueError when the report's keys are not report_keys() (a package and a runner from
    different releases)."""
    missing, unknown = sorted(report_keys() - report.keys()), sorted(report.keys() - report_keys())
    if missing or unknown:
        raise ValueError(f"begin_run's report does not match runner/run/plan.py Facts (missing: {', '.join(missing) or '-'}; "
                         f"unknown: {', '.join(unknown) or '-'}): the sqlserver_cdc package and the runner must come "
                         "from the same release")

    def landed(d: dict | None) -> dict[str, Landed]:
        return {k: Landed(v.get("lsn"), v.get("batch") or "", v.get("min_lsn")) for k, v in (d or {}).items()
                if v and (v.get("batch") or v.get("lsn"))}

    def lowered(d: dict | None) -> dict[str, str]:
        """A per-database map's keys lower-cased but their database part (a database name keeps its case)."""
        return {dbkey(db, key.lower()): v for k, v in (d or {}).items() if v for db, key in [split_dbkey(k)]}

    previous = report.get("previous")
    events = event_arrivals(report["event_arrivals"])
    report = {**report, **(intake or {}), **events, "arrived": {**report.get("arrived", {}), **events["arrived"]}}
    return Facts(
        run_id=report["run_id"],
        tables=tuple(Table(t["name"], t["channel"], tuple((i["name"].lower(), bool(i.get("dropped"))) for i in t["instances"]),
                           t.get("digest", ""), tuple(t.get("databases") or ("",)), bool(t.get("tenant")),
                           tuple((c[0].lower(), c[1].lower(), c[2].lower(), int(c[3])) for c in t.get("captured") or ()))
                     for t in report["tables"]),
        previous=_previous(previous, landed) if previous else None,
        landed_now={k: int(v) for k, v in (report.get("landed_now") or {}).items()},
        arrived=landed(report.get("arrived")),
        ces_unrouted=report.get("ces_unrouted"),
        debezium_snapshot_end=dict(report.get("debezium_snapshot_end") or {}),
        manifests=tuple(Manifest(m["instance"].lower(), m.get("after_lsn"), m["through_lsn"], m["batch"],
                                 m.get("database") or "") for m in report.get("manifests") or []),
        snapshots=tuple(Snapshot(s["table"].lower(), s["lsn"], s["batch"], s.get("database") or "")
                        for s in report.get("snapshots") or []),
        watermarks={k: Watermark(v.get("lsn"), v.get("batch"), v.get("declaration"))
                    for k, v in (report.get("watermarks") or {}).items()},
        relations=frozenset(r.lower() for r in report.get("relations") or []),
        instance_min_lsn=lowered(report.get("instance_min_lsn")),
        views_digest=report.get("views_digest", ""),
        seeds={name: Seed(v["relation"].lower(), v["checksum"]) for name, v in (report.get("seeds") or {}).items()},
        audit_tagged=bool(report["audit_tagged"]),
        refused=tuple(report.get("refused") or ()),
        refused_for_another=tuple(report.get("refused_for_another") or ()),
        waiting=tuple(report.get("waiting") or ()),
        ignored=tuple(report.get("ignored") or ()),
        late_commit_times=lowered(report.get("late_commit_times")),
        cdc_jobs_retention={db: str(v) for db, v in (report.get("cdc_jobs_retention") or {}).items() if v is not None},
        database_names=dict(report.get("database_names") or {}),
        captured_columns=_captured(report.get("captured_columns") or []),
    )


def _captured(rows: list[list]) -> dict[str, dict[str, tuple[str, int]]]:
    """begin_run's captured_columns rows, [database, instance, column, type, ordinal], by dbkey(database, instance)."""
    found: dict[str, dict[str, tuple[str, int]]] = {}
    for database, instance, column, column_type, ordinal in rows:
        if instance and column and ordinal is not None:
            found.setdefault(dbkey(database or "", instance.lower()), {})[column.lower()] = (
                (column_type or "").lower().split("(")[0].strip(), int(ordinal))
    return found
