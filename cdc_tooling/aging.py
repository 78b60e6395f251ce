"""The benchmark's aging phase's generated runs (`--phases aging`, driven by cdc_tooling/bench.py
aging_phases; docs/performance.md "Maintenance"): what thousands of small runs do to the tables the
runner writes, with and without maintenance, and with Delta's auto compaction instead.

A real run is too slow to repeat thousands of times here (about 19 s on two cores, most of it
planning and checks), so the aging is made by **a run's commits without the run**: after an
initial load and one real run of a batch of `many_batch` changes on every table through the runner
(whose commits are the template), each generated run makes, per table, the commits that run made,
of the same size and shape: the raw table's append of the batch's landed rows (a file per landed
file and one for the landed-file records), the lsn_time_mapping staging's insert-only MERGE, the
staging table's append of its typed rows, the history mart's MERGE (the touched keys' open
versions closed, a new version each: a deletion vector on each file holding them and a new file),
the current-state mart's MERGE (the keys updated: the same), the run ledger's append and the
watermark table's rewrite (its staging watermarks moved to the generated batch, so the raw
retention takes in what a run would let it).

A generated run is made one of two ways, to the same commits:
- **by Spark** (`Template.statements`): the commits as SQL statements (MERGE, INSERT), about 9 s a
  run on two cores. The runs that are timed (41-60, "at run 50", and the last 20) are made this
  way, and run 1, which `equal_commits` compares with the real run;
- **by the writer** (`Generator`, cdc_tooling/delta_writer.py): the same rows written with pyarrow,
  the deletion vectors in Delta's format, each commit made by Delta's own transaction (its log
  entry, checksum and checkpoints as Delta writes them), about 1.5 s a run: every other run.
  `writer_equal` shows the two equal: from one state, the writer on one copy and Spark on another
  make runs 2 to 4, and each commit's files, deletion vectors and rows (Delta's operation metrics)
  and every table's rows must be the same.

Every variant starts from a copy of the warehouse's folders as the real run found them
(`snapshot`), so generated run 1 updates the real run's own keys in the same files; every later
run updates as many keys drawn at random (seeded by the run), as a real batch's fall in the table's
files. Variants, each on a copy (a schema of its own):
- `none`: `aging_runs` generated runs, no maintenance;
- `maintained`: the same runs, a maintenance pass (runner/run/maintain.py, the one `serve` makes)
  every `aging_pass_every` runs (12: hourly, for five-minute runs), with the retention passed at
  once (`retention_hours` 0, the raw retention a second) so that the storage figures are those
  after the retention;
- `auto`: `aging_auto_runs` generated runs by Spark with Delta's auto compaction on (its
  post-commit hook runs only after Spark's own writes).

Reported per variant: a run's cost (the sum of its commits' seconds, by Spark: the median of runs
41-60 and of the last 20, and each commit's by table), the control's (the copy as run 60 left it,
which makes runs 61-80 each right after one of the last 20: young tables in the same JVM and
minutes, so a growth at the end is told apart as the tables' or the machine's and the process's),
files per table and the commits each table's log holds (the copies keep their whole log:
LOG_HELD), live bytes against the bytes on disk (data and log), the JVM's heap after a GC, the
passes' seconds and the longest maintenance of one table. The variants' marts must be equal
row for row (maintenance changes no row) and hold what the generated runs wrote
(`reference_equal`)."""

from __future__ import annotations

import io
import os
import random
import shutil
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from statistics import median_high

import pyarrow as pa
import pyarrow.compute as pc

from runner.run import report

VARIANTS = ("maintained", "none", "auto")  # the targets' variant first
MEASURED = (41, 60)  # runs whose median is "at run 50"
LAST = 20  # the last runs whose median is "at the end"
WRITER_CHECKED = (2, 4)  # the runs writer_equal compares, made by the writer and by Spark from one state
# the file of the raw table a landed row's run writes it to: one per landed file, one for the records
LANDED_FILE = "case when landing_kind = 'landed_files' then '' else _source_file end"
# the maintained variant's cdc_maintenance: Delta's retention passed at once (0: files a run removed
# are VACUUMed by the next VACUUM); a VACUUM every 9 minutes of the phase's time, about 270 runs at
# two seconds a run and its passes: serve's default of one a day, at five-minute runs (288 a day)
SETTINGS = {"compact_after_files": 32, "retention_hours": 0, "vacuum_every_hours": 0.15,
            "raw_retention_days": 0.00001, "overdue_hours": 1000}
FINAL_PASS_AHEAD = 1.0  # hours the last pass's clock is ahead: every table's VACUUM is due (the retention has passed)
MAPPING = "stg_cdc_metadata__lsn_time_mapping"
# Delta deletes a log's expired commits when it writes a checkpoint, those older than the retention
# rounded down to the day (UTC). The maintained copy's retention is 0, so a phase that crossed
# midnight UTC lost its commits from before it and measured its end on a day's log (2026-12-07: 307
# commits a table against 2,000). The copies keep their whole log instead: the phase's end stands for
# the log a 7-day retention keeps at five-minute runs, whatever the clock (log_kept counts the
# cleanup for the storage figures)
LOG_HELD = "delta.enableExpiredLogCleanup"
# the columns a generated run stamps with the time it ran: left out where two runs are compared
STAMPED = ("_ingested_at", "recorded_at", "valid_from", "valid_to", "commit_time", "started_at", "ended_at")


def relations(schema: str, tables: list[str]) -> list[str]:
    """Every table a run of `tables` writes in `schema` (and its raw schema)."""
    names = ["cdc_runs", "cdc_watermarks", MAPPING, "stg_cdc_metadata__change_tables",
             "stg_cdc_metadata__captured_columns"]
    names += [n for t in tables for n in (f"stg_change_tables__{t}", f"{t}_history", f"{t}_current")]
    return [f"{schema}.{n}" for n in names] + [f"{schema}_raw.landed_rows"]


def _location(spark, relation: str) -> Path:
    return Path(spark.sql(f"describe detail {relation}").collect()[0]["location"].removeprefix("file:"))


def snapshot(spark, source: str, tables: list[str], folder: Path) -> None:
    """The folders of the source warehouse's tables (data files, deletion vectors and Delta log)
    copied as they are into `folder`, a table in each: the state every variant's copy starts from."""
    shutil.rmtree(folder, ignore_errors=True)
    for relation in relations(source, tables):
        shutil.copytree(_location(spark, relation), folder / relation.split(".", 1)[1])


def copy_schema(spark, tables: list[str], origin: str | Path, schema: str, folder: Path) -> None:
    """The tables of `origin` (a schema, or a snapshot's folder) copied, folder by folder, into
    `folder` and named in `schema` (and its raw schema): each table with its files, deletion vectors
    and log as they are."""
    for s in (schema, f"{schema}_raw"):
        spark.sql(f"drop schema if exists {s} cascade")
        spark.sql(f"create schema {s}")
    shutil.rmtree(folder, ignore_errors=True)
    for relation in relations(schema, tables):
        name = relation.split(".", 1)[1]
        where = origin / name if isinstance(origin, Path) else _location(
            spark, relation.replace(f"{schema}.", f"{origin}.", 1).replace(f"{schema}_raw.", f"{origin}_raw.", 1))
        shutil.copytree(where, folder / name)
        spark.sql(f"create table {relation} using delta location '{folder / name}'")
        spark.sql(f"alter table {relation} set tblproperties ('{LOG_HELD}' = 'false')")


class Template:
    """The warehouse the real runs made (schema `source`), the snapshot taken before its real run
    (`snapshot`), the keys each generated run touches and its commits as Spark statements."""

    def __init__(self, spark, source: str, tables: list[str], keys: int, before: Path):
        self.spark, self.source, self.tables, self.keys, self.before = spark, source, tables, keys, before
        raw = f"{source}_raw.landed_rows"
        self.batch = spark.sql(f"select max(_batch_id) from {raw} where landing_kind = 'change_tables'").collect()[0][0]
        self.lsn = int(spark.sql(f"select max(valid_from_lsn) from {source}.{tables[0]}_history").collect()[0][0], 16)
        self.columns = {name: spark.table(f"{source}.{name}").columns
                        for name in [MAPPING, *(n for t in tables for n in (f"stg_change_tables__{t}", f"{t}_history",
                                                                           f"{t}_current"))]}
        self.ledger_columns = spark.table(f"{source}.cdc_runs").columns
        # the files the real run's raw append wrote: one per landed file, one for the landed-file records
        self.raw_files = spark.sql(f"select count(distinct {LANDED_FILE}) from {raw} "
                                   f"where _batch_id = '{self.batch}'").collect()[0][0]
        # keys alive at the start (the batch updates keys: none is inserted or deleted)
        self.live = [r[0] for r in spark.sql(f"select id from {source}.{tables[0]}_current where not is_deleted "
                                             "order by id").collect()]
        # the keys the real run updated, per table
        self.real_keys = {t: sorted(r[0] for r in spark.sql(
            f"select distinct id from {source}.stg_change_tables__{t} where _batch_id = '{self.batch}'").collect())
            for t in tables}
        self.start: dict[int, str] = {}

    def run_batch(self, run: int) -> str:
        return f"{self.batch[:8]}T99{run:016d}Z-aging"  # above every real batch, in run order

    def run_lsn(self, run: int) -> str:
        return f"{self.lsn + 64 * run:020X}"

    def touched(self, run: int, t: str) -> list[int]:
        """The keys run `run` updates in table t: run 1 the real run's own (on the snapshot taken before
        it, the same rows in the same files: its commits must be the real run's), every later run as
        many keys drawn at random (seeded by the run), as a real batch's fall in the table's files."""
        if run == 1:
            return self.real_keys[t]
        return sorted(random.Random(f"aging {t} {run}").sample(self.live, len(self.real_keys[t])))

    def relations(self, schema: str) -> list[str]:
        return relations(schema, self.tables)

    def copy_to(self, schema: str, folder: Path) -> None:
        """The snapshot's tables copied into `folder` and named in `schema`: the files, deletion
        vectors and log the source had before its real run, so that a generated run's MERGEs find
        the rows where the real run found them."""
        copy_schema(self.spark, self.tables, self.before, schema, folder)
        self.start = self.current_values(schema)

    def statements(self, schema: str, run: int) -> list[tuple[str, str]]:
        """A generated run's commits by Spark, in a run's order: (table, statement). The appends take
        the real run's batch from the source warehouse (the copies start before it)."""
        batch, lsn = self.run_batch(run), self.run_lsn(run)
        raw = f"{schema}_raw.landed_rows"
        # the batch's landed rows (changes, lsn_time_mapping rows, landed-file records) in one append,
        # a file for each landed file's rows and one for the records, as landing writes them
        found = [(raw, (f"insert into {raw} select /*+ REPARTITION_BY_RANGE({self.raw_files}, landed_file) */ "
                       f"row_values, raw_text, concat(_source_file, '#{run}'), _source_size, "
                       f"_source_modified_ms, '{batch}', current_timestamp(), landing_kind, entity, source_database "
                       f"from (select *, {LANDED_FILE} as landed_file from {self.source}_raw.landed_rows "
                       f"where _batch_id = '{self.batch}')"))]
        # the mapping's staging takes its rows in by an insert-only MERGE, as the real run's does
        found.append((MAPPING, (f"merge into {schema}.{MAPPING} as t using ({self._select(MAPPING, batch)}) as s "
                                "on false when not matched then insert *")))
        for t in self.tables:
            key_list = ", ".join(str(k) for k in self.touched(run, t))
            staging = f"stg_change_tables__{t}"
            found.append((staging, f"insert into {schema}.{staging} {self._select(staging, batch)}"))
            found.append((f"{t}_history", self._history_merge(schema, t, key_list, lsn, run)))
            found.append((f"{t}_current", self._current_merge(schema, t, key_list, lsn, run)))
        ledger = ", ".join(f"'{batch}' as run_id" if c == "run_id" else c for c in self.ledger_columns)
        # the real run's ledger row again (the copies' last is the initial load's)
        found.append(("cdc_runs", (f"insert into {schema}.cdc_runs select {ledger} from {self.source}.cdc_runs "
                                  f"where run_id = (select max(run_id) from {self.source}.cdc_runs)")))
        found.append(("cdc_watermarks", (f"insert overwrite table {schema}.cdc_watermarks select model_name, watermark_lsn, "
                                        "invocation_id, current_timestamp(), case when model_name like 'stg_%' then "
                                        f"'{batch}' else watermark_batch end, declaration, source_database "
                                        f"from {schema}.cdc_watermarks")))
        return found

    def _select(self, table: str, batch: str) -> str:
        """The template batch's staged rows again, as batch `batch`."""
        cols = ", ".join(f"'{batch}' as _batch_id" if c == "_batch_id" else c for c in self.columns[table])
        return f"select {cols} from {self.source}.{table} where _batch_id = '{self.batch}'"

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
        for name in (f"{schema}_raw.landed_rows", f"{schema}.{MAPPING}", f"{schema}.stg_change_tables__{t}",
                     f"{schema}.{t}_history", f"{schema}.{t}_current"):
            row = self.spark.sql(f"describe history {name} limit 1").collect()[0]
            found[name.split(".", 1)[1]] = {"operation": row["operation"], **dict(row["operationMetrics"] or {})}
        return found

    def marts(self, schema: str) -> dict[str, list[str]]:
        """Every mart's rows (all columns but the times a run stamps), sorted."""
        return {mart: self.rows(f"{schema}.{mart}") for t in self.tables for mart in (f"{t}_history", f"{t}_current")}

    def rows(self, relation: str) -> list[str]:
        """A table's rows as sorted JSON, without the columns a run stamps with its time."""
        cols = [c for c in self.spark.table(relation).columns if c not in STAMPED]
        return sorted(r[0] for r in self.spark.sql(f"select to_json(struct({', '.join(cols)})) from {relation}").collect())

    def current_values(self, schema: str) -> dict[int, str]:
        return {r[0]: r[1] for r in self.spark.sql(
            f"select id, cast(c1 as string) from {schema}.{self.tables[0]}_current where not is_deleted").collect()}

    def expected_current(self, runs: int) -> dict[int, str]:
        """What the generated runs leave in the first table's current-state c1: each touched key the
        number of the last run that touched it, the others their value at the start (the copy's)."""
        values = dict(self.start)
        for run in range(1, runs + 1):
            for key in self.touched(run, self.tables[0]):
                values[key] = str(run)
        return values


class Generator:
    """Generated runs by the writer (cdc_tooling/delta_writer.py) on the copy in `schema`: the same
    commits as Template.statements, with the template batch's rows read once from the source
    warehouse's files and each mart's open rows indexed by key (read again whenever another writer,
    Spark or a maintenance pass, committed to it)."""

    def __init__(self, template: Template, schema: str):
        from cdc_tooling.delta_writer import DeltaTable  # pyroaring: the dev extra's

        spark = template.spark
        self.template, self.schema = template, schema
        self.tables = {relation.split(".", 1)[1]: DeltaTable(spark, _location(spark, relation))
                       for relation in template.relations(schema) if not relation.endswith(("_change_tables",
                                                                                            "_captured_columns"))}

        def batch_rows(table, where: str = "_batch_id"):
            found = [table.rows(p) for p in sorted(table.files)]
            found = [f.filter(pc.equal(f.column(where), template.batch)) for f in found]
            return _concat([f for f in found if f.num_rows])

        source = {relation.split(".", 1)[1]: DeltaTable(spark, _location(spark, relation))
                  for relation in template.relations(template.source)
                  if relation.endswith(("landed_rows", MAPPING, "cdc_runs")) or "stg_change_tables__" in relation}
        raw = batch_rows(source["landed_rows"])
        landed = [("" if kind == "landed_files" else name) for kind, name in
                  zip(raw.column("landing_kind").to_pylist(), raw.column("_source_file").to_pylist())]
        self.raw_parts = []  # (rows, partition values) per file the real run's raw append wrote
        for group in sorted(set(landed)):
            rows = raw.filter(pc.equal(pa.array(landed), group))
            partition = {c: rows.column(c)[0].as_py() for c in source["landed_rows"].partition_columns}
            self.raw_parts.append((rows, partition))
        self.staged = {name: batch_rows(table) for name, table in source.items()
                       if name == MAPPING or name.startswith("stg_change_tables__")}
        ledger = _concat([source["cdc_runs"].rows(p) for p in sorted(source["cdc_runs"].files)])
        self.ledger_row = ledger.take([pc.index(ledger.column("run_id"), pc.max(ledger.column("run_id"))).as_py()])
        self.index: dict[str, tuple[int, dict]] = {}  # mart: (the version it was read at, {key: (path, row)})

    def run(self, run: int) -> None:
        """Generated run `run`: its commits, in a run's order."""
        t = self.template
        batch, lsn, now = t.run_batch(run), t.run_lsn(run), datetime.now(timezone.utc).replace(tzinfo=None)
        raw = self.tables["landed_rows"]
        raw.append([(_set(rows, _source_file=_suffixed(rows.column("_source_file"), f"#{run}"), _batch_id=batch,
                          _ingested_at=now), partition) for rows, partition in self.raw_parts])
        self.tables[MAPPING].insert_merge(_set(self.staged[MAPPING], _batch_id=batch))
        for name in t.tables:
            staging = f"stg_change_tables__{name}"
            self.tables[staging].append([(_set(self.staged[staging], _batch_id=batch), None)])
            keys = t.touched(run, name)
            history = f"{name}_history"
            matched, old = self._matched(history, keys, "is_current")
            closed = _set(old, valid_to_lsn=lsn, valid_to=now, is_current=False)
            opened = _set(old, c1=run, valid_from_lsn=lsn, valid_from=now, valid_to_lsn=None, valid_to=None,
                          is_current=True, operation="update")
            self._merge(history, matched, _concat([closed, opened]), updated=old.num_rows, inserted=old.num_rows,
                        opened="is_current")
            current = f"{name}_current"
            matched, old = self._matched(current, keys)
            updated = _set(old, c1=run, commit_lsn=lsn, commit_time=now, operation="update")
            self._merge(current, matched, updated, updated=old.num_rows, inserted=0)
        self.tables["cdc_runs"].append([(_set(self.ledger_row, run_id=batch), None)])
        marks = self.tables["cdc_watermarks"]
        rows = _concat([_live(marks, p) for p in sorted(marks.files)])
        staged = [m.startswith("stg_") for m in rows.column("model_name").to_pylist()]
        batches = [batch if s else b for s, b in zip(staged, rows.column("watermark_batch").to_pylist())]
        marks.overwrite(_set(rows, recorded_at=now, watermark_batch=batches))

    def _index(self, mart: str, open_only: str | None) -> dict:
        """Key -> (file, row) of the mart's live rows (open versions only: `open_only` true), read
        again when another writer committed to the mart since."""
        table = self.tables[mart]
        table.refresh()
        version, index = self.index.get(mart, (-1, {}))
        if version != table.version:
            index = {}
            for path in sorted(table.files):
                rows, gone = table.rows(path), table.deleted(path)
                flags = rows.column(open_only).to_pylist() if open_only else None
                for i, key in enumerate(rows.column("id").to_pylist()):
                    if i not in gone and (flags is None or flags[i]):
                        index[key] = (path, i)
            self.index[mart] = (table.version, index)
        return index

    def _matched(self, mart: str, keys: list[int], open_only: str | None = None):
        """The rows of `keys` in the mart: {file: [row, ...]} and the rows themselves."""
        index = self._index(mart, open_only)
        matched: dict[str, list[int]] = {}
        for key in keys:
            path, row = index[key]
            matched.setdefault(path, []).append(row)
        table = self.tables[mart]
        return matched, _concat([table.rows(p).take(rows) for p, rows in sorted(matched.items())])

    def _merge(self, mart: str, matched: dict, added, updated: int, inserted: int, opened: str | None = None) -> None:
        table = self.tables[mart]
        _, index = self.index[mart]
        path = table.merge(matched, added, updated=updated, inserted=inserted, source_rows=added.num_rows)
        flags = added.column(opened).to_pylist() if opened else None
        for i, key in enumerate(added.column("id").to_pylist()):
            if flags is None or flags[i]:
                index[key] = (path, i)
        self.index[mart] = (table.version, index)


def _concat(tables):
    return pa.concat_tables(tables, promote_options="permissive") if len(tables) != 1 else tables[0]


def _suffixed(column, suffix: str):
    return pc.binary_join_element_wise(column, suffix, "")


def _live(table, path: str):
    """A file's rows its deletion vector leaves."""
    rows, gone = table.rows(path), table.deleted(path)
    return rows if not gone else rows.take([i for i in range(rows.num_rows) if i not in gone])


def _set(rows, **values):
    """`rows` with columns set: to one value for every row (None: null), or to a list or an Arrow
    array of a value per row."""
    for name, value in values.items():
        at = rows.column_names.index(name)
        field = rows.schema.field(at)
        if isinstance(value, (pa.Array, pa.ChunkedArray)):
            column = value.cast(field.type)
        elif isinstance(value, list):
            column = pa.array(value).cast(field.type)
        elif value is None:
            column = pa.nulls(rows.num_rows, field.type)
        else:
            column = pa.array([value] * rows.num_rows).cast(field.type)
        rows = rows.set_column(at, field, column)
    return rows


# the operation metrics that make a commit's files and deletion vectors what they are
SHAPE = ("numTargetFilesAdded", "numTargetFilesRemoved", "numTargetDeletionVectorsAdded", "numTargetDeletionVectorsRemoved",
         "numTargetDeletionVectorsUpdated", "numTargetRowsUpdated", "numTargetRowsInserted", "numTargetRowsDeleted",
         "numTargetRowsCopied", "numFiles", "numOutputRows", "numRemovedFiles")


def equal_commits(real: dict, generated: dict) -> dict:
    """Per table, one run's last commit and another's, compared on SHAPE: {table: {equal, metrics:
    {name: (real, generated)}}}."""
    found = {}
    for t, commits in real.items():
        for name, metrics in commits.items():
            mine = generated[t][name]
            shape = {k: (metrics.get(k), mine.get(k)) for k in SHAPE if k in metrics or k in mine}
            shape["operation"] = (metrics.get("operation"), mine.get("operation"))
            found[name] = {"equal": all(a == b for a, b in shape.values()), "metrics": shape}
    return found


def writer_equal(spark, template: Template, schema: str, folder: Path) -> dict:
    """Runs WRITER_CHECKED made by the writer on `schema` and by Spark on a copy of it taken first
    (schema `<schema>_spark`), compared commit by commit (equal_commits) and, after the last,
    table by table (every row, without the columns stamped with the run's time). Leaves `schema`
    after the writer's runs (the copy is dropped)."""
    probe = f"{schema}_spark"
    copy_schema(spark, template.tables, schema, probe, folder)
    generator = Generator(template, schema)
    commits = {}
    for run in range(WRITER_CHECKED[0], WRITER_CHECKED[1] + 1):
        for _, statement in template.statements(probe, run):
            spark.sql(statement).collect()
        generator.run(run)
        commits[run] = equal_commits({t: template.last_commits(t, probe) for t in template.tables},
                                     {t: template.last_commits(t, schema) for t in template.tables})
    tables = {relation.split(".", 1)[1]: template.rows(relation) == template.rows(
        relation.replace(f"{schema}.", f"{probe}.", 1).replace(f"{schema}_raw.", f"{probe}_raw.", 1))
        for relation in template.relations(schema)}
    for s in (probe, f"{probe}_raw"):
        spark.sql(f"drop schema if exists {s} cascade")
    shutil.rmtree(folder, ignore_errors=True)
    equal = all(c["equal"] for run in commits.values() for c in run.values()) and all(tables.values())
    return {"equal": equal, "runs": list(commits), "commits": commits, "tables": tables}


def age(spark, template: Template, schema: str, runs: int, variant: str, project: Path, target, pass_every: int,
        progress, check_writer: Path | None = None, control_folder: Path | None = None) -> dict:
    """`runs` generated runs on `schema` (see the module's docstring); returns the variant's figures.
    check_writer: a scratch folder, where writer_equal makes runs WRITER_CHECKED (its report is the
    figures' `writer_equal`). control_folder: a scratch folder, where the copy's tables are kept as
    run 60 left them; during the last 20 runs that copy makes runs 61-80, each right after one of
    them (`control`: the same JVM and minutes, young tables)."""
    from runner.run.dbt import Dbt
    from runner.run.maintain import run_pass

    seconds: dict[int, float] = {}
    by_table: dict[int, dict[str, float]] = {}
    control_seconds: dict[int, float] = {}
    by_table_control: dict[int, dict[str, float]] = {}
    control_schema = f"{schema}_control"
    control_made = False
    passes: list[float] = []
    longest = 0.0
    os.environ["SQLSERVER_CDC_SCHEMA"] = schema
    if variant == "auto":
        spark.conf.set("spark.databricks.delta.autoCompact.enabled", "true")
    dbt = Dbt(project, target.name, {"cdc_raw_schema": f"{schema}_raw"}) if variant == "maintained" else None
    quiet = report.Progress(stream=io.StringIO())
    files_at: dict[int, dict[str, int]] = {}
    heap_at: dict[int, float] = {}
    commits_at: dict[int, dict[str, int]] = {}
    first: dict[str, dict] = {}
    generator = None
    checked: dict | None = None
    timed = set(range(MEASURED[0], MEASURED[1] + 1)) | set(range(runs - LAST + 1, runs + 1)) | {1}
    started = time.perf_counter()
    try:
        for run in range(1, runs + 1):
            if check_writer and WRITER_CHECKED[0] <= run <= WRITER_CHECKED[1]:
                if run == WRITER_CHECKED[0]:
                    checked = writer_equal(spark, template, schema, check_writer)
                    progress.step(f"bench: aging: the writer's runs {WRITER_CHECKED[0]}-{WRITER_CHECKED[1]} "
                                  f"{'equal' if checked['equal'] else 'NOT equal'} to Spark's")
            elif run in timed or variant == "auto":
                seconds[run], by_table[run] = _timed_run(spark, template, schema, run)
                if run > runs - LAST and control_made:  # the run-60 copy's next run, in the same minutes
                    step = MEASURED[1] + run - (runs - LAST)
                    control_seconds[step], by_table_control[step] = _timed_run(spark, template, control_schema, step)
            else:
                generator = generator or Generator(template, schema)
                generator.run(run)
            if run == 1:  # what equal_commits compares with the real run's (before any maintenance)
                first = {t: template.last_commits(t, schema) for t in template.tables}
            if dbt is not None and run % pass_every == 0:
                clock = time.perf_counter()
                done = run_pass(dbt, project, f"{schema}_raw", quiet).done
                passes.append(time.perf_counter() - clock)
                longest = max([longest, *(float(r["seconds"]) for r in done)])
            if run == MEASURED[1] and control_folder is not None:  # the copy at run 60, aged again at the end
                snapshot(spark, schema, template.tables, control_folder)
            if run == runs - LAST and control_folder is not None:
                copy_schema(spark, template.tables, control_folder, control_schema, control_folder.with_name(control_schema))
                control_made = True
            if run in (MEASURED[1], runs):
                files_at[run] = _files(spark, template, schema)
                heap_at[run] = _heap_mib(spark)
                commits_at[run] = {r.split(".", 1)[1]: log_kept(_location(spark, r) / "_delta_log")["versions"]
                                   for r in template.relations(schema)}
            if run % 250 == 0:
                progress.step(f"bench: aging: {variant}: run {run:,} ({time.perf_counter() - started:.0f} s)")
        final = None
        if dbt is not None:  # the storage once the retention has passed: a pass with every VACUUM due
            clock = time.perf_counter()
            ahead = datetime.now(timezone.utc).replace(tzinfo=None) + timedelta(hours=FINAL_PASS_AHEAD)
            done = run_pass(dbt, project, f"{schema}_raw", quiet, now=lambda: ahead).done
            final = {"seconds": time.perf_counter() - clock, "tables": len(done),
                     "vacuumed": sum(1 for r in done if str(r.get("vacuumed")).lower() == "true")}
            longest = max([longest, *(float(r["seconds"]) for r in done)])
    finally:
        spark.conf.unset("spark.databricks.delta.autoCompact.enabled")
    at_50 = [s for r, s in seconds.items() if MEASURED[0] <= r <= MEASURED[1]]
    at_end = [s for r, s in seconds.items() if r > runs - LAST]
    statements = {"at_50": _medians(by_table, range(MEASURED[0], MEASURED[1] + 1)),
                  "at_end": _medians(by_table, range(runs - LAST + 1, runs + 1))}
    if control_seconds:
        statements["control"] = _medians(by_table_control, control_seconds)
        for s in (control_schema, f"{control_schema}_raw"):
            spark.sql(f"drop schema if exists {s} cascade")
        for folder in (control_folder, control_folder.with_name(control_schema)):
            shutil.rmtree(folder, ignore_errors=True)
    disk = _disk(spark, template, schema)
    marts = {k: v for k, v in files_at[runs].items() if k.endswith(("_history", "_current"))}
    return {
        "run_seconds": {"at_50": median_high(at_50), "at_end": median_high(at_end),
                        "max": max(seconds.values()),
                        **({"control": median_high(control_seconds.values())} if control_seconds else {})},
        "statement_seconds": statements,
        "runs_by_spark": len(seconds), "files_at_50": files_at.get(MEASURED[1]), "files_at_end": files_at[runs],
        "log_commits_at_50": commits_at.get(MEASURED[1]), "log_commits_at_end": commits_at[runs],
        "heap_mib_at_50": heap_at.get(MEASURED[1]), "heap_mib_at_end": heap_at[runs],
        "max_mart_files": max(marts.values()), "first_commits": first, "disk": disk, "passes": len(passes),
        "pass_seconds_max": max(passes, default=0.0),
        "pass_seconds_median": median_high(passes) if passes else 0.0, "longest_table_maintenance": longest,
        "final_pass": final, "values_equal": template.current_values(schema) == template.expected_current(runs),
        **({"writer_equal": checked} if checked else {}),
    }


def _timed_run(spark, template: Template, schema: str, run: int) -> tuple[float, dict[str, float]]:
    """A generated run by Spark: its seconds, and each commit's by the table it commits to."""
    each: dict[str, float] = {}
    for table, statement in template.statements(schema, run):
        clock = time.perf_counter()
        spark.sql(statement).collect()
        each[table.rsplit(".", 1)[-1]] = time.perf_counter() - clock
    return sum(each.values()), each


def _heap_mib(spark) -> float:
    """The driver JVM's heap in use after a full GC, MiB: what the JVM holds after the runs so far."""
    jvm = spark._jvm
    jvm.java.lang.System.gc()
    return round(jvm.java.lang.management.ManagementFactory.getMemoryMXBean().getHeapMemoryUsage().getUsed() / 2**20, 1)


def _medians(by_table: dict[int, dict[str, float]], runs) -> dict[str, float]:
    """Each table's commit seconds, the median over `runs` (those timed)."""
    timed = [by_table[r] for r in runs if r in by_table]
    return {t: round(median_high(r[t] for r in timed), 3) for t in (timed[0] if timed else {})}


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
