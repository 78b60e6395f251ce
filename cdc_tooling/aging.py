"""The benchmark's aging phase's generated runs (`--phases aging`, driven by cdc_tooling/bench.py
aging_phases; docs/performance.md "Maintenance"): what thousands of
small runs do to the tables the runner writes, with and without maintenance, and with Delta's
auto compaction instead.

A real run of `aging_tables` tables is too slow to repeat thousands of times here (10 s and more
on two cores, most of it planning and checks), so the aging is made by **a run's commits without
the run**: after an initial load and one real run of a batch of `many_batch` changes on every table
through the runner (whose commits are the template), each generated run makes, per table, the
commits that run made, of the same size and shape: the raw table's append of the batch's landed
rows, the staging table's append of its typed rows, the history mart's MERGE (the touched keys'
open versions closed, a new version each: a deletion vector on the file holding them and a new
file), the current-state mart's MERGE (the keys updated: a deletion vector and a new file); then
the run ledger's append and the watermark table's rewrite (its staging watermarks moved to the
generated batch, so the raw retention takes in what a run would let it). `equal_commits`
compares each commit of generated run 1 (on the template's copy, so on the same table as the real
run's) on its Delta operation metrics (files and deletion vectors added and removed, rows) with
the real run's: the report says whether they are equal.

Variants, each on a copy of the same warehouse (a schema of its own):
- `none`: `aging_runs` generated runs, no maintenance;
- `maintained`: the same runs, a maintenance pass (runner/run/maintain.py, the one `serve` makes)
  every `aging_pass_every` runs (12: hourly, for five-minute runs), with the retention passed at
  once (`retention_hours` 0, the raw retention a second) so that the storage figures are those
  after the retention;
- `auto`: `aging_auto_runs` generated runs with Delta's auto compaction on (its post-commit hook).

Reported per variant: a run's cost (the sum of its commits' seconds: the median of runs 41-60 and
of the last 20), files per table, live bytes against the bytes on disk (data and log), the passes'
seconds and the longest maintenance of one table. The variants' marts must be equal row for row
(maintenance changes no row) and hold what the generated runs wrote (`reference_equal`)."""

from __future__ import annotations

import io
import os
import time
from pathlib import Path

from runner.run import report

VARIANTS = ("none", "maintained", "auto")
MEASURED = (41, 60)  # runs whose median is "at run 50"
LAST = 20  # the last runs whose median is "at the end"
# the file of the raw table a landed row's run writes it to: one per landed file, one for the records
LANDED_FILE = "case when landing_kind = 'landed_files' then '' else _source_file end"
SETTINGS = {"compact_after_files": 32, "retention_hours": 0, "vacuum_every_hours": 0.0001,
            "raw_retention_days": 0.00001, "overdue_hours": 1000}


class Template:
    """The warehouse the real runs made (schema `source`) and the statements of a generated run."""

    def __init__(self, spark, source: str, tables: list[str], keys: int):
        self.spark, self.source, self.tables, self.keys = spark, source, tables, keys
        raw = f"{source}_raw.landed_rows"
        self.batch = spark.sql(f"select max(_batch_id) from {raw} where landing_kind = 'change_tables'").collect()[0][0]
        self.lsn = int(spark.sql(f"select max(valid_from_lsn) from {source}.{tables[0]}_history").collect()[0][0], 16)
        self.columns = {name: spark.table(f"{source}.{name}").columns
                        for name in ["stg_cdc_metadata__lsn_time_mapping",
                                     *(n for t in tables for n in (f"stg_change_tables__{t}", f"{t}_history", f"{t}_current"))]}
        self.ledger_columns = spark.table(f"{source}.cdc_runs").columns
        # the files the real run's raw append wrote: one per landed file, one for the landed-file records
        self.raw_files = spark.sql(f"select count(distinct {LANDED_FILE}) from {raw} "
                                   f"where _batch_id = '{self.batch}'").collect()[0][0]
        # keys alive at the start, every one touched in turn
        self.live = [r[0] for r in spark.sql(f"select id from {source}.{tables[0]}_current where not is_deleted "
                                             "order by id").collect()]

    def touched(self, run: int) -> list[int]:
        """The 10 keys run `run` updates: one in each tenth of the live keys, as a batch's random keys
        fall in every file of the table (keys side by side would all fall in one), a key no earlier
        run touched until the runs pass a tenth of the keys."""
        step = max(len(self.live) // 10, 1)
        return [self.live[(run + i * step) % len(self.live)] for i in range(10)]

    def relations(self, schema: str) -> list[str]:
        names = ["cdc_runs", "cdc_watermarks", "stg_cdc_metadata__lsn_time_mapping", "stg_cdc_metadata__change_tables",
                 "stg_cdc_metadata__captured_columns"]
        names += [n for t in self.tables for n in (f"stg_change_tables__{t}", f"{t}_history", f"{t}_current")]
        return [f"{schema}.{n}" for n in names] + [f"{schema}_raw.landed_rows"]

    def copy_to(self, schema: str) -> None:
        """The source warehouse's tables copied into `schema` (and its raw schema), as Delta tables
        of their own (each one commit; deletion vectors on the marts, as the runner creates them)."""
        for s in (schema, f"{schema}_raw"):
            self.spark.sql(f"drop schema if exists {s} cascade")
            self.spark.sql(f"create schema {s}")
        for relation in self.relations(schema):
            name = relation.split(".", 1)[1]
            origin = f"{self.source}_raw.landed_rows" if relation.endswith("_raw.landed_rows") else f"{self.source}.{name}"
            dv = " tblproperties (delta.enableDeletionVectors = true)" if name.endswith(("_history", "_current")) else ""
            parts = " partitioned by (landing_kind, entity)" if name == "landed_rows" else ""
            # a mart in as many files as the origin (rows dealt round robin, as a batch's random keys
            # fall in every file), so that a generated run's MERGEs touch as many files as the real run's
            spread = ""
            if dv:
                spread = f"/*+ REPARTITION({self.spark.sql(f'describe detail {origin}').collect()[0]['numFiles']}) */ "
            self.spark.sql(f"create table {relation} using delta{parts}{dv} as select {spread}* from {origin}")

    def statements(self, schema: str, run: int) -> list[tuple[str, str]]:
        """A generated run's commits, in a run's order: (table, statement)."""
        batch = f"{self.batch[:8]}T99{run:016d}Z-aging"  # above every real batch, in run order
        lsn = f"{self.lsn + 64 * run:020X}"
        key_list = ", ".join(str(k) for k in self.touched(run))
        raw = f"{schema}_raw.landed_rows"
        # the batch's landed rows (changes, lsn_time_mapping rows, landed-file records) in one append,
        # a file for each landed file's rows and one for the records, as landing writes them
        found = [(raw, (f"insert into {raw} select /*+ REPARTITION_BY_RANGE({self.raw_files}, landed_file) */ "
                       f"row_values, raw_text, concat(_source_file, '#{run}'), _source_size, "
                       f"_source_modified_ms, '{batch}', current_timestamp(), landing_kind, entity, source_database "
                       f"from (select *, {LANDED_FILE} as landed_file from {raw} where _batch_id = '{self.batch}')"))]
        mapping = "stg_cdc_metadata__lsn_time_mapping"
        found.append((mapping, self._append(schema, mapping, batch)))
        for t in self.tables:
            staging = f"stg_change_tables__{t}"
            found.append((staging, self._append(schema, staging, batch)))
            found.append((f"{t}_history", self._history_merge(schema, t, key_list, lsn, run)))
            found.append((f"{t}_current", self._current_merge(schema, t, key_list, lsn, run)))
        ledger = ", ".join(f"'{batch}' as run_id" if c == "run_id" else c for c in self.ledger_columns)
        found.append(("cdc_runs", (f"insert into {schema}.cdc_runs select {ledger} from {schema}.cdc_runs "
                                  f"where run_id = (select max(run_id) from {schema}.cdc_runs)")))
        found.append(("cdc_watermarks", (f"insert overwrite table {schema}.cdc_watermarks select model_name, watermark_lsn, "
                                        "invocation_id, current_timestamp(), case when model_name like 'stg_%' then "
                                        f"'{batch}' else watermark_batch end, declaration, source_database "
                                        f"from {schema}.cdc_watermarks")))
        return found

    def _append(self, schema: str, table: str, batch: str) -> str:
        """The append of the template batch's staged rows again, as batch `batch`."""
        cols = ", ".join(f"'{batch}' as _batch_id" if c == "_batch_id" else c for c in self.columns[table])
        return f"insert into {schema}.{table} select {cols} from {schema}.{table} where _batch_id = '{self.batch}'"

    def _current_merge(self, schema: str, t: str, key_list: str, lsn: str, run: int) -> str:
        values = {"c1": str(run), "commit_lsn": f"'{lsn}'", "commit_time": "current_timestamp()", "operation": "'update'"}
        cols = ", ".join(f"{values[c]} as {c}" if c in values else c for c in self.columns[f"{t}_current"])
        return (f"merge into {schema}.{t}_current as c using (select /*+ COALESCE(1) */ {cols} from {schema}.{t}_current "
                f"where id in ({key_list})) as s on c.id = s.id when matched then update set *")

    def _history_merge(self, schema: str, t: str, key_list: str, lsn: str, run: int) -> str:
        """The history MERGE: each touched key's open version closed and a new one opened, from one
        select of each open version twice, in one partition as the real MERGE's source (a union of
        two selects, or the scan of two files, would be two write tasks: two files where the real
        MERGE writes one)."""
        columns = self.columns[f"{t}_history"]
        closed = {"valid_to_lsn": f"'{lsn}'", "valid_to": "current_timestamp()", "is_current": "false"}
        opened = {"c1": str(run), "valid_from_lsn": f"'{lsn}'", "valid_from": "current_timestamp()",
                  "valid_to_lsn": "cast(null as string)", "valid_to": "cast(null as timestamp)", "is_current": "true",
                  "operation": "'update'"}

        def column(c: str) -> str:
            if c not in closed and c not in opened:
                return c
            return (f"case when opened then {opened.get(c, c)} else {closed.get(c, c)} end as {c}")

        source = (f"select /*+ COALESCE(1) */ {', '.join(column(c) for c in columns)} from {schema}.{t}_history "
                  f"lateral view explode(array(false, true)) sides as opened "
                  f"where is_current and id in ({key_list})")
        return (f"merge into {schema}.{t}_history as h using ({source}) as s "
                "on h.id = s.id and h.valid_from_lsn = s.valid_from_lsn when matched then update set * "
                "when not matched then insert *")

    def last_commits(self, t: str, schema: str | None = None) -> dict[str, dict]:
        """The operation metrics of the last commit of each of table t's tables (the raw table's too)."""
        schema = schema or self.source
        found = {}
        for name in (f"{schema}_raw.landed_rows", f"{schema}.stg_change_tables__{t}", f"{schema}.{t}_history",
                     f"{schema}.{t}_current"):
            row = self.spark.sql(f"describe history {name} limit 1").collect()[0]
            found[name.split(".", 1)[1]] = {"operation": row["operation"], **dict(row["operationMetrics"] or {})}
        return found

    def marts(self, schema: str) -> dict[str, list[str]]:
        """Every mart's rows (all columns but the times the generator stamped), sorted."""
        found = {}
        for t in self.tables:
            for mart, drop in ((f"{t}_history", ("valid_from", "valid_to")), (f"{t}_current", ("commit_time",))):
                cols = [c for c in self.columns[mart] if c not in drop]
                found[mart] = sorted(r[0] for r in self.spark.sql(
                    f"select to_json(struct({', '.join(cols)})) from {schema}.{mart}").collect())
        return found

    def current_values(self, schema: str) -> dict[int, str]:
        return {r[0]: r[1] for r in self.spark.sql(
            f"select id, cast(c1 as string) from {schema}.{self.tables[0]}_current where not is_deleted").collect()}

    def expected_current(self, runs: int) -> dict[int, str]:
        """What the generated runs leave in the first table's current-state c1: each touched key the
        number of the last run that touched it, the others their value at the start."""
        values = self.current_values(self.source)
        for run in range(1, runs + 1):
            for key in self.touched(run):
                values[key] = str(run)
        return values


# the operation metrics that make a commit's files and deletion vectors what they are
SHAPE = ("numTargetFilesAdded", "numTargetFilesRemoved", "numTargetDeletionVectorsAdded", "numTargetDeletionVectorsRemoved",
         "numTargetRowsUpdated", "numTargetRowsInserted", "numTargetRowsDeleted", "numTargetRowsCopied", "numFiles",
         "numOutputRows")


def equal_commits(real: dict, generated: dict) -> dict:
    """Per table, the real run's last commit and a generated run's, compared on SHAPE: {table:
    {equal, metrics: {name: (real, generated)}}}."""
    found = {}
    for t, commits in real.items():
        for name, metrics in commits.items():
            mine = generated[t][name]
            shape = {k: (metrics.get(k), mine.get(k)) for k in SHAPE if k in metrics or k in mine}
            found[name] = {"equal": all(a == b for a, b in shape.values()), "metrics": shape}
    return found


def age(spark, template: Template, schema: str, runs: int, variant: str, project: Path, target, pass_every: int,
        progress) -> dict:
    """`runs` generated runs on `schema` (see the module's docstring); returns the variant's figures."""
    from runner.run.dbt import Dbt
    from runner.run.maintain import run_pass

    seconds: list[float] = []
    passes: list[float] = []
    longest = 0.0
    os.environ["SQLSERVER_CDC_SCHEMA"] = schema
    if variant == "auto":
        spark.conf.set("spark.databricks.delta.autoCompact.enabled", "true")
    dbt = Dbt(project, target.name, {"cdc_raw_schema": f"{schema}_raw"}) if variant == "maintained" else None
    quiet = report.Progress(stream=io.StringIO())
    files_at: dict[int, dict[str, int]] = {}
    first: dict[str, dict] = {}
    try:
        for run in range(1, runs + 1):
            started = time.perf_counter()
            for _, statement in template.statements(schema, run):
                spark.sql(statement).collect()
            seconds.append(time.perf_counter() - started)
            if run == 1:  # what equal_commits compares with the real run's (before any maintenance)
                first = {t: template.last_commits(t, schema) for t in template.tables}
            if dbt is not None and run % pass_every == 0:
                clock = time.perf_counter()
                done = run_pass(dbt, project, f"{schema}_raw", quiet).done
                passes.append(time.perf_counter() - clock)
                longest = max([longest, *(float(r["seconds"]) for r in done)])
            if run in (MEASURED[1], runs):
                files_at[run] = _files(spark, template, schema)
            if run % 250 == 0:
                progress.step(f"bench: aging: {variant}: run {run:,}, the last {min(250, run)} runs' commits "
                              f"{sum(seconds[-250:]) / len(seconds[-250:]):.2f} s on average")
    finally:
        spark.conf.unset("spark.databricks.delta.autoCompact.enabled")
    at_50 = sorted(seconds[MEASURED[0] - 1:MEASURED[1]])
    at_end = sorted(seconds[-LAST:])
    disk = _disk(spark, template, schema)
    marts = {k: v for k, v in files_at[runs].items() if k.endswith(("_history", "_current"))}
    return {
        "run_seconds": {"at_50": at_50[len(at_50) // 2], "at_end": at_end[len(at_end) // 2], "max": max(seconds),
                        "p95": sorted(seconds)[int(len(seconds) * 0.95)]},
        "files_at_50": files_at.get(MEASURED[1]), "files_at_end": files_at[runs], "max_mart_files": max(marts.values()),
        "first_commits": first, "disk": disk, "passes": len(passes), "pass_seconds_max": max(passes, default=0.0),
        "pass_seconds_median": sorted(passes)[len(passes) // 2] if passes else 0.0, "longest_table_maintenance": longest,
    }


def _files(spark, template: Template, schema: str) -> dict[str, int]:
    return {relation.split(".", 1)[1]: spark.sql(f"describe detail {relation}").collect()[0]["numFiles"]
            for relation in template.relations(schema)}


def _disk(spark, template: Template, schema: str) -> dict[str, int]:
    """Live bytes (DESCRIBE DETAIL) against the bytes on disk: data files and deletion vectors, and
    the Delta log; and the log once its retention has passed (`log_bytes_kept`, log_kept)."""
    live = data = log = kept = versions = versioned = 0
    for relation in template.relations(schema):
        detail = spark.sql(f"describe detail {relation}").collect()[0]
        live += detail["sizeInBytes"]
        root = Path(detail["location"].removeprefix("file:"))
        for p in root.rglob("*"):
            if p.is_file() and "_delta_log" not in p.parts and not p.name.startswith("."):
                data += p.stat().st_size
        found = log_kept(root / "_delta_log")
        log, kept = log + found["bytes"], kept + found["kept"]
        versions, versioned = versions + found["versions"], versioned + found["commit_bytes"]
    return {"live_bytes": live, "data_bytes_on_disk": data, "log_bytes": log, "log_bytes_kept": kept,
            "log_bytes_per_commit": round(versioned / versions) if versions else None,
            "on_disk_over_live": round((data + log) / live, 2) if live else None,
            "on_disk_over_live_after_retention": round((data + kept) / live, 2) if live else None}


def log_kept(log: Path) -> dict[str, int]:
    """A Delta log's bytes, and those its cleanup keeps once the log's retention has passed: Delta
    deletes, when it writes a checkpoint, the commits and checkpoints older than both the retention
    (rounded down to the day) and the newest checkpoint before it; once every commit is older than
    the retention, what is left is the newest checkpoint, the commits after it and the files that
    are no commit (`_last_checkpoint`). The aging phase's maintenance sets a retention of 0 (the
    log's with it, runner/run/maintenance.py wanted_properties), so this is its log on the next day.
    commit_bytes / versions: a commit's bytes (its JSON and checksum) on average."""
    files = [p for p in log.rglob("*") if p.is_file()]

    def version(p: Path) -> int | None:
        head = p.name.split(".", 1)[0]
        return int(head) if head.isdigit() and len(head) == 20 else None

    checkpoints = [version(p) for p in files if ".checkpoint" in p.name and version(p) is not None]
    newest = max(checkpoints, default=0)
    size = {p: p.stat().st_size for p in files}
    commits = [p for p in files if p.suffix in (".json", ".crc") and version(p) is not None and p.parent == log]
    return {"bytes": sum(size.values()),
            "kept": sum(n for p, n in size.items() if version(p) is None or version(p) >= newest),
            "versions": len({version(p) for p in commits}), "commit_bytes": sum(size[p] for p in commits)}
