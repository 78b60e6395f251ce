"""`python -m runner`: run the pipeline, audit the tables, or scaffold declarations.

The demo, the data generator and the benchmark are `python -m cdc_tooling`.

Exit codes: 0 success; 1 a model or test failed (or rows were quarantined with --strict);
2 usage, configuration or infrastructure error. The last line says what failed and what to do.
"""

from __future__ import annotations

import argparse
import threading
import time
import uuid
from datetime import datetime, timezone
from pathlib import Path

from runner.errors import EXIT_OK, InfrastructureError, PipelineFailed, RunnerError, UsageError
from runner.project.config import (
    declared_databases,
    export_manifests_required,
    maintenance_settings,
)
from runner.project.tables import check_model_files, exported_columns
from runner.run import layout, maintenance, plan, report
from runner.run.dbt import Dbt, failures
from runner.run.lock import RunnerLock, describe_previous, lock_path, state_dir
from runner.run.unchanged import LastRun
from runner.run.watchdog import Deadline, abandon
from runner.sources import kafka, landing
from runner.sources.folders import Folder, display, is_uri, open_folder
from runner.spark.profile import load_target
from runner.spark.session import create_file_writer_session, create_session

PROJECT_DIR = Path(__file__).resolve().parents[2]


def common_arguments(p: argparse.ArgumentParser) -> None:
    """--project-dir, --target and --landing (cdc_tooling's commands take them too)."""
    p.add_argument("--project-dir", type=Path, default=PROJECT_DIR, help="the dbt project (default: this one)")
    p.add_argument("--target", default=None, help="profiles.yml target (default: the profile's, 'local')")
    p.add_argument("--landing", default=None,
                   help="landing folder: a local path or a URI Hadoop reads, e.g. hdfs://, s3a://, abfss:// "
                        "(default: <project>/landing)")
    p.add_argument("--verbose", action="store_true",
                   help="also print dbt's line per model and test (default: the runner's progress lines, its summary "
                        "and dbt's errors; logs/dbt.log holds dbt's whole log either way)")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m runner", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    common = common_arguments

    run = sub.add_parser("run", help="land new files, build the marts for one LSN window, report")
    common(run)
    run.add_argument("--full-refresh", action="store_true",
                     help="rebuild every mart from all staged changes (staging takes in only what is new)")
    run.add_argument("--restage", action="store_true",
                     help="also rebuild every staging table from the raw table, e.g. after upgrading the package or to "
                          "fill a newly declared column in rows staged before it (implies --full-refresh)")
    run.add_argument("--select", nargs="+", default=[], help="dbt selection (default: everything)")
    run.add_argument("--upper-lsn", default=None, help="cap the run's upper LSN (any LSN form)")
    run.add_argument("--strict", action="store_true",
                     help="exit 1 when this batch quarantined rows, or a table is under --min-headroom")
    run.add_argument("--min-headroom", type=float, metavar="HOURS",
                     help="warn when SQL Server's cleanup would reach a table's first unapplied change within HOURS "
                          "(docs/operations.md \"Retention headroom\"); with --strict, exit 1")
    run.add_argument("--accept-kafka-gap", nargs="+", default=[], metavar="SOURCE",
                     help="Kafka sources whose retention gap (or recreated topic) to skip, once a snapshot is landed")

    resident = sub.add_parser("serve", help="stay resident: a run at start, every --every seconds and as soon as new "
                                            "files settle in the landing folder or Kafka records arrive, with metrics "
                                            "and health over HTTP")
    common(resident)
    resident.add_argument("--every", type=float, default=300, metavar="SECONDS",
                          help="run at least this often (default 300)")
    resident.add_argument("--poll", type=float, default=2, metavar="SECONDS",
                          help="list the landing folder (and poll Kafka's end offsets) this often (default 2)")
    resident.add_argument("--max-failures", type=int, default=3, metavar="N",
                          help="failed runs in a row that make /healthz answer 503 (default 3; 0: never)")
    resident.add_argument("--metrics-port", type=int, default=9464, metavar="PORT",
                          help="serve /metrics (Prometheus) and /healthz on this port (default 9464; 0: any free port)")
    resident.add_argument("--metrics-host", default="127.0.0.1", metavar="HOST",
                          help="the address to bind (default 127.0.0.1: this machine only)")

    resident.add_argument("--run-limit", type=_seconds, default=None, metavar="SECONDS",
                          help="a run in progress longer than this makes /healthz answer 503 (default: 5 x the longest "
                               "successful run, at least 900 s; before the first, 900 s and 60 s per declared table)")
    resident.add_argument("--stale-after", type=_seconds, default=None, metavar="SECONDS",
                          help="no successful run for this long makes /healthz answer 503 (default: the run limit and "
                               "two --every intervals)")

    resident.add_argument("--maintain-every", type=_seconds, default=3600, metavar="SECONDS",
                          help="maintain the tables between runs this often: compaction, VACUUM, retention (default "
                               "3600; docs/operations.md \"Maintenance\")")

    audit = sub.add_parser("audit", help="run every data test on whole tables (a normal run checks only its batch)")
    common(audit)
    audit.add_argument("--select", nargs="+", default=[], help="dbt selection of the tests' models (default: everything)")

    maintain = sub.add_parser("maintain", help="maintain the tables the runner writes: compact small files and deletion "
                                               "vectors, VACUUM removed files past the retention, apply the raw "
                                               "retention (serve does it between runs)")
    common(maintain)
    status = sub.add_parser("status", help="each table the runner writes: files, bytes, what VACUUM may reclaim, its "
                                           "last maintenance and what a maintenance pass would do now")
    common(status)
    for p in (run, audit, resident, maintain, status):
        p.add_argument("--wait", type=float, default=0, metavar="SECONDS",
                       help="when another runner holds the warehouse, wait up to SECONDS for it (default: exit 2 at once)")
        p.add_argument("--timeout", type=_seconds, default=None, metavar="SECONDS",
                       help="abandon a run that has not finished SECONDS after it took the warehouse, as a kill would "
                            "(nothing half-applied; the next run applies it), and exit 2 naming the step it was at "
                            "(serve: exit 2 for its supervisor to restart it; default: no limit)")

    scaffold = sub.add_parser("scaffold", help="declare captured tables (and write their model files and YAML docs) "
                                               "from the landed cdc.captured_columns and cdc.change_tables exports")
    common(scaffold)
    scaffold.add_argument("--tables", nargs="+", default=[], help="only these tables (names or capture instances)")
    scaffold.add_argument("--key", nargs="+", default=[], metavar="TABLE=COLUMN[,COLUMN]",
                          help="the key of a table whose metadata does not give it")
    scaffold.add_argument("--name", nargs="+", default=[], metavar="SOURCE=NAME",
                          help="the model name of a table (SOURCE: capture instance, source table, schema.table, each "
                               "also as DATABASE:SOURCE); a declared table keeps its name on re-runs")
    scaffold.add_argument("--tenants", nargs="+", default=[], metavar="PATTERN",
                          help="declare the tables of the databases this pattern of var cdc_databases matches (e.g. "
                               "'tenant_*') as tenant tables: one pair of marts over all of them, keyed by source_database")

    init = sub.add_parser("init", help="start your own project: remove the demo's tables (declarations, model files, "
                                       "YAML entries), keep the package")
    init.add_argument("--project-dir", type=Path, default=PROJECT_DIR, help="the dbt project (default: this one)")

    return parser


def _seconds(text: str) -> float:
    """A positive number of seconds (argparse type)."""
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not value > 0:
        raise argparse.ArgumentTypeError(f"takes a number of seconds above 0; got {text!r}")
    return value


def _batch_id() -> str:
    return datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S%fZ") + "-" + uuid.uuid4().hex[:6]


def run_pipeline(project_dir: Path, target, landing_dir: Path | str | Folder, *, select: list[str] = (),
                 full_refresh: bool = False, restage: bool = False, upper_lsn: str | None = None, strict: bool = False,
                 progress=None, kafka_sources: list | None = None, accept_kafka_gap: list[str] = (),
                 nodes: list | None = None, listed: dict[str, tuple[int, int]] | None = None,
                 min_headroom: float | None = None, notes: list | None = None,
                 timings: dict | None = None, rows: list | None = None) -> list[dict]:
    """Lands, plans, builds and reports one run; returns the summary rows (one per tracked table)
    and adds the build's node results (runner.run.plan.NodeResult) to `nodes` when given.
    Four dbt invocations on one parse of the project (docs/operations.md "The runner"): `run-operation
    open_run` creates what is missing and reports the last batch, which the run's batch id follows
    (plan.batch_id); `run-operation begin_run` lands the new files and reports the facts the run is
    planned from; runner/run/plan.py
    decides the windows and what to build; `dbt build` builds only that (the plan reaches the
    models as var cdc_plan); `run-operation finish_run` records the watermarks the plan's
    `advance` moved and writes the run ledger's row, once. Every step is SQL sent through dbt, so
    it runs on whatever Spark the target names (for a session target, the caller has created the
    SparkSession first), except landing from Kafka sources (default: the project's), which
    appends to the raw table from the session before begin_run (runner/sources/kafka.py). Raises
    PipelineFailed (also when strict and this run's batches quarantined rows, or when a Kafka
    source stopped at a retention gap). `notes` receives what the run said about files that wait and the
    cut (report.landing_lines): true until the landing folder or the warehouse change. `timings` receives
    the wall seconds of its three steps: landing (begin_run: landing and the plan's facts), build and
    record (finish_run). full_refresh rebuilds every mart from what is staged; restage also rebuilds
    every staging table from the raw table."""
    timings = {} if timings is None else timings
    full_refresh = full_refresh or restage  # restaging rebuilds the marts from the restaged rows
    progress = progress or report.Progress()
    started_at = datetime.now(timezone.utc)
    # constant across runs, so one parse serves them (the plan is a var of the build only)
    dbt = Dbt(project_dir, target.name, {"cdc_raw_schema": target.raw_schema}, activity=progress.activity,
              node_log=progress.dbt_nodes)
    manifests_required = export_manifests_required(project_dir)
    if upper_lsn is not None:
        given, upper_lsn = upper_lsn, landing.canonical_lsns(dbt, [upper_lsn]).get(upper_lsn)
        if upper_lsn is None:
            raise UsageError(f"--upper-lsn {given} is not an LSN; give e.g. 0x0000002C00000300017C")
    folder = open_folder(landing_dir, hadoop=target.owns_jvm)
    sources = kafka.sources(project_dir) if kafka_sources is None else kafka_sources
    if sources and not folder.exists():  # a project fed by Kafka alone needs no landing folder
        files = []
    else:
        files = landing.files_to_land(folder, landing.csv_dialects(project_dir), exported_columns(project_dir),
                                      settled=listed, databases=declared_databases(project_dir))
    clock_id = _batch_id()
    opened = layout.open_warehouse(dbt, target.raw_schema, [f["relative"] for f in files])
    settings = maintenance_settings(project_dir)
    if restage and (refusal := maintenance.restage_refusal(opened.get("raw_held_from"), settings.raw_retention_days)):
        raise UsageError(refusal)
    batch_id = plan.batch_id(clock_id, opened["last_batch"] or "")
    if batch_id != clock_id:
        progress.step(f"this machine's clock is behind the last landed batch or recorded run: batch {batch_id} "
                      f"continues after it (the clock said {clock_id.split('-')[0]})")
    stopped = _land_kafka(target, sources, batch_id, accept_kafka_gap, progress) if sources else []
    if sources and not folder.exists():
        progress.step(f"no landing folder {folder}: no files to land (batch {batch_id})")
    else:
        progress.step(f"landing new files from {folder} (batch {batch_id})")
    clock = time.monotonic()
    taken = landing.intake(dbt, folder, files, opened.get("landed") or {}, target.raw_schema)
    begun = dbt.operation("sqlserver_cdc.begin_run", {
        "files": taken.accepted, "batch_id": batch_id, "raw_schema": target.raw_schema,
        "first_records": not opened.get("records_kept")}).get("begin_run")
    if begun is None:
        raise InfrastructureError("begin_run reported nothing: is the project's sqlserver_cdc package current?")
    try:
        facts = plan.facts_from_report(begun, taken.facts())
    except ValueError as exc:
        raise InfrastructureError(str(exc)) from None
    the_plan = plan.plan_run(facts, plan.Options(
        upper_lsn=upper_lsn, full_refresh=full_refresh, restage=restage, select=tuple(select),
        manifests_required=manifests_required,
        unsettled=tuple(f["relative"] for f in files if f.get("unsettled"))))
    timings["landing"] = time.monotonic() - clock
    progress.step(f"landed {sum(facts.landed_now.values())} records from {len(facts.landed_now)} folders "
                  f"({timings['landing']:.1f} s with the plan's facts)")
    for line in report.landing_lines(facts, the_plan):
        progress.step(line)
        if notes is not None:
            notes.append(line)
    for line in report.window_lines(facts, the_plan):
        progress.step(line)
    results: list[plan.NodeResult] = []
    command = plan.dbt_build(the_plan, facts)
    if the_plan.status == "nothing_to_do":
        progress.step("nothing new landed and every mart is at its upper bound: nothing to build")
    elif command is None:
        progress.step("no table has changes in its window: nothing to build")
    else:
        progress.step("dbt build" + (" --full-refresh" + (", staging rebuilt from the raw table" if restage else
                                                            ", the marts from what is staged") if full_refresh else "")
                      + ("" if select or full_refresh else f" of {len(the_plan.build)} model(s)"))
        clock = time.monotonic()
        results = dbt.build(list(command.select), command.full_refresh, exclude=list(command.exclude),
                            run_vars={"cdc_plan": the_plan.var()}, populate_cache=command.populate_cache)
        timings["build"] = time.monotonic() - clock
        progress.step(f"built {sum(1 for r in results if r.resource_type in ('model', 'test', 'seed'))} node(s) in "
                      f"{timings['build']:.1f} s")
    if nodes is not None:
        nodes.extend(results)
    outcome = plan.advance(the_plan, facts, results)
    clock = time.monotonic()
    finished = dbt.operation("sqlserver_cdc.finish_run", _finish_args(the_plan, facts, outcome, started_at, stopped)
                             ).get("finish_run")
    if finished is None:
        raise InfrastructureError("finish_run reported nothing: is the project's sqlserver_cdc package current?")
    timings["record"] = time.monotonic() - clock
    progress.step(f"recorded the watermarks and the run ledger's row ({timings['record']:.1f} s)")
    summary = finished["tables"]
    if rows is not None:  # also when the run fails below, or has nothing to do
        rows.extend(summary)
    quarantined = sum(int(r["quarantined"]) for r in summary)
    if the_plan.status != "nothing_to_do":
        for stream in finished["streams"]:
            progress.step(report.stream_line(stream["channel"], stream))
            quarantined += int(stream["quarantined"])
        report.print_table(report.summary_table(summary))
    if quarantined:
        progress.step(f"{quarantined} landed rows were quarantined in this run's batches: see the cdc_quarantine view "
                      f"(where _batch_id <= '{batch_id}')")
    problems = _refused(list(facts.refused), stopped)
    if outcome.failed:
        problems.insert(0, f"{len(outcome.failed)} failure(s) ({'; '.join(outcome.failed[:3])}); watermarks of the "
                           "affected marts were not advanced: fix the cause and re-run")
    if problems:
        raise PipelineFailed(". ".join(problems))
    short = report.headroom_warnings(summary, the_plan.retention, min_headroom)
    for line in short:
        progress.step(line)
    if line := maintenance.overdue(settings, maintenance.utcnow(), maintenance.parse_time(opened.get("maintained_at")),
                                   maintenance.batch_time(opened.get("first_run") or "")):
        progress.step(line)
    if strict and quarantined:
        raise PipelineFailed("rows were quarantined and --strict is set; inspect cdc_quarantine")
    if strict and short:
        raise PipelineFailed(f"{len(short)} table(s) under the retention headroom and --strict is set: see WARNING above")
    return summary if the_plan.status != "nothing_to_do" else []


def _finish_args(the_plan: plan.Plan, facts: plan.Facts, outcome: plan.Outcome, started_at: datetime,
                 stopped: list[str]) -> dict:
    """What finish_run records: the ledger row's fields, the counts to take per tracked table and
    database it reads (in a project of several databases each row names its database), the moved
    watermarks."""
    previous = facts.previous.tables if facts.previous else {}
    several = any(db for t in facts.tables for db in t.databases)
    tables = []
    for t in facts.tables:
        parts = {p.database: p for p in the_plan.models[t.current].parts}
        for db in t.databases:
            mark = outcome.watermarks.get(plan.dbkey(db, t.current), plan.Watermark())
            part, before = parts.get(db), previous.get(plan.dbkey(db, t.name)) or {}
            retention = the_plan.retention.get(db)
            tables.append({
                "name": t.name, "channel": t.channel, "staging": t.staging, "tenant": t.tenant, "database_id": db,
                "source_database": facts.database_names.get(db, db) if several else None,
                "staged": outcome.watermarks.get(t.staging, plan.Watermark()).batch == the_plan.run_id,
                "applied": t.current in outcome.built and t.history in outcome.built and (part is not None or not t.tenant),
                "lower_lsn": part.lower_lsn if part else (facts.mark(t.current, db).lsn or ""),
                "lower_batch": part.lower_batch if part else (facts.mark(t.current, db).batch or ""),
                "lsn_reached": mark.lsn, "batch_reached": mark.batch,
                "advanced": outcome.advanced.get(plan.dbkey(db, t.current), False),
                "current_rows": before.get("current_rows"), "history_versions": before.get("history_versions"),
                "capture_lsn": the_plan.landed_lsn.get(plan.dbkey(db, "change_tables")),
                "retention_minutes": retention.minutes if retention else None,
            })
    streams = [{"channel": channel, "counted": outcome.watermarks.get(model, plan.Watermark()).batch == the_plan.run_id,
                "quarantined_total": (facts.previous.streams.get(channel, {}) if facts.previous else {}).get("quarantined_total")}
               for channel, model in plan.EVENT_MODELS.items() if any(t.channel == channel for t in facts.tables)]
    moved = [{"model": model, "database": db or None, "lsn": w.lsn, "batch": w.batch, "declaration": w.declaration}
             for key, w in sorted(outcome.watermarks.items()) if facts.watermarks.get(key) != w
             for db, model in [plan.split_dbkey(key)]]
    run = {
        "run_id": the_plan.run_id, "started_at": started_at.strftime("%Y-%m-%d %H:%M:%S.%f"), "status": outcome.status,
        "full_refresh": the_plan.full_refresh, "since_run_id": the_plan.since, "landed": facts.landed_now,
        "landed_lsn": {k: v for k, v in the_plan.landed_lsn.items() if v},
        "upper_lsn": {k: v for k, v in the_plan.upper_lsn.items() if v},
        "upper_batch": {k: v for k, v in the_plan.upper_batch.items() if v},
        "exported_lsn": {k: v for k, v in the_plan.exported.items() if v},
        "manifests_from": the_plan.manifests_from, "refused": [*facts.refused, *stopped],
        "failed_nodes": outcome.failed,
        "landed_through": {k: {"lsn": v.lsn, "batch": v.batch} for k, v in sorted(the_plan.landed.items())},
        "plan": the_plan.to_json(outcome),
        "retention_minutes": the_plan.retention[""].landed if "" in the_plan.retention else None,
        "retentions": {db: r.landed for db, r in the_plan.retention.items() if r.landed is not None},
    }
    counts = count_groups(tables)  # the fields only the counts read go there
    tables = [{k: v for k, v in t.items() if k not in COUNTED_ONLY} for t in tables]
    return {"run": run, "tables": tables, "streams": streams, "watermarks": moved, "counts": counts}


# what _finish_args' rows per table and database carry for count_groups alone
COUNTED_ONLY = ("staging", "tenant", "staged", "applied", "lower_lsn", "lower_batch", "batch_reached")


def count_groups(tables: list[dict]) -> list[dict]:
    """What finish_run counts (macros/runner/finish_run.sql `_run_counts`), one group per tracked
    table the run staged or applied (`tables`: _finish_args' rows, one per table and database), so
    that each table's staging and marts are read once whatever the number of its databases. A
    group's `rows`, one per database: its key, the database its rows carry in staging and the
    marts ('' unless a tenant table, whose rows carry source_database), whether the rows of the
    run's batches count as landed (`staged`), whether its changes count as applied (`applied`: its
    marts were built and reached an LSN), whether its marts' rows are counted (`marts`) and the
    bounds of the changes applied (above the current-state mart's watermark before the run, up to
    the one after). And the staging read's literal filters, so that Delta skips other batches'
    files: the run's batches when a database staged (`read_batches`), and above the lowest lower
    bound of a database whose changes count (`read_above`: an LSN for change tables, a batch for
    the event channels, whose events arrive out of order); `marts`: whether any mart is read."""
    groups: dict[str, dict] = {}
    for t in tables:
        if not (t["staged"] or t["applied"]):
            continue
        group = groups.setdefault(t["name"], {"name": t["name"], "staging": t["staging"], "channel": t["channel"],
                                              "tenant": t["tenant"], "rows": []})
        group["rows"].append({
            "key": plan.dbkey(t["database_id"], t["name"]), "db": (t["source_database"] or "") if t["tenant"] else "",
            "staged": t["staged"], "applied": bool(t["applied"] and t["lsn_reached"]), "marts": t["applied"],
            "lower_lsn": t["lower_lsn"] or "", "lower_batch": t["lower_batch"] or "",
            "lsn_reached": t["lsn_reached"] or "", "batch_reached": t["batch_reached"] or ""})
    for group in groups.values():
        bound = "lower_lsn" if group["channel"] == "change_tables" else "lower_batch"
        lowest = [r[bound] for r in group["rows"] if r["applied"]]
        group.update(read_batches=any(r["staged"] for r in group["rows"]), read_above=min(lowest) if lowest else None,
                     marts=any(r["marts"] for r in group["rows"]))
    return list(groups.values())


def _land_kafka(target, sources: list, batch_id: str, accept_gap, progress) -> list[str]:
    """Lands the Kafka sources' new records with the run's batch id (before begin_run, which then
    sees them as landed; open_run created the raw table); returns why sources stopped (retention
    gaps), each already reported."""
    from pyspark.sql import SparkSession

    spark = SparkSession.getActiveSession()
    if spark is None:
        raise UsageError("Kafka sources are read in the runner's own SparkSession: use a session target")
    progress.step(f"reading {len(sources)} Kafka source(s) up to the partitions' end offsets at this run's start")
    stopped = []
    for result in kafka.land(spark, sources, landing.raw_table(target.raw_schema), batch_id, tuple(accept_gap)):
        read = [p for p in result.partitions if p.start is not None and p.end > p.start]
        if not result.stopped:
            progress.step(f"Kafka source {result.source}: {result.records} records from {len(read)} of "
                          f"{len(result.partitions)} partitions")
        for note in result.notes:
            progress.step(f"Kafka source {result.source}: {note}")
        for reason in result.stopped:
            progress.step(f"STOPPED {reason}")
        stopped += result.stopped
    return stopped


def _refused(refused: list[str], stopped: list[str] = ()) -> list[str]:
    """What the run says about sources that landed nothing: Kafka partitions stopped at a gap,
    files refused (their tables wait for them, see runner/run/plan.py _held)."""
    problems = []
    if stopped:
        problems.append(f"{len(stopped)} Kafka partition(s) stopped their source (listed above): it landed nothing, "
                        "everything else was landed and applied. Follow the remedy above, then re-run")
    if refused:
        problems.append(f"{len(refused)} landing file(s) were refused (listed above) and landed nothing; everything else "
                        "was landed, and the tables a refused export feeds wait for it. Remedy each as its REFUSED line "
                        "says and re-run")
    return problems


def _landing_dir(args) -> Path | str:
    """--landing: a URI as given, a local folder resolved (default: the project's landing/)."""
    if args.landing and is_uri(args.landing) and not args.landing.lower().startswith("file:"):
        return args.landing
    return open_folder(args.landing or args.project_dir / "landing").root


def main(argv: list[str] | None = None, kafka_sources: list | None = None, clock: float | None = None) -> int:
    """The command line; `kafka_sources` replaces the project's and `clock` (time.monotonic()) is
    when the progress lines' elapsed time starts (the demo's, cdc_tooling: one clock for its lines)."""
    args = _parser().parse_args(argv)
    progress = report.Progress(dbt_nodes=getattr(args, "verbose", False), started=clock)
    try:
        args.project_dir = args.project_dir.resolve()
        if args.command == "scaffold":
            return _scaffold(args, progress)
        if args.command == "init":
            return _init(args, progress)
        target = load_target(args.project_dir, args.target)
        if kafka_sources is None:
            kafka_sources = kafka.sources(args.project_dir) if args.command in ("run", "serve") else []
        # a local folder, or a URI listed through fsspec for a target whose Spark runs elsewhere, is listed
        # before Spark starts; a URI on a session target through Hadoop in the runner's SparkSession
        # (runner/sources/folders.py)
        through_spark = is_uri(_landing_dir(args)) and target.owns_jvm
        folder = open_folder(_landing_dir(args), hadoop=target.owns_jvm)  # a URI with a secret is refused here
        if args.command in ("run", "serve") and not kafka_sources and not through_spark:
            landing.discover(folder)  # a missing landing folder is a usage error: fail before Spark
        check_model_files(args.project_dir)
        for source in kafka_sources:  # settings and secrets checked before Spark starts
            source.client_options()
        if kafka_sources and not target.owns_jvm:
            raise UsageError(f"target {target.name} {'is Spark Connect' if target.remote else 'uses method ' + target.method}: "
                             "Kafka sources are read (their offsets through Kafka's client) in the runner's own SparkSession, "
                             "so they need a session target that is not Spark Connect (docs/channels.md \"Reading from Kafka "
                             "and Event Hubs\")")
        with RunnerLock(lock_path(target, args.project_dir), target.name, args.command).acquire(args.wait, progress) as held:
            if args.command != "serve":  # the service's runs begin in its loop
                progress.activity.begin()
            if args.timeout:
                expire = abandoner(target, held, progress)
                Deadline(args.timeout, progress.activity,
                         lambda where: expire(timed_out(args.timeout, where), InfrastructureError.exit_code)).start()
            if describe_previous(held):
                progress.step(describe_previous(held))
            if args.command == "serve":
                parse_project(args, target)
                return _serve(args, target, held, kafka_sources, progress)
            if args.command in ("maintain", "status"):
                parse_project(args, target)
                start_spark(args, target, held, progress, [])
                return _maintain(args, target, progress)
            listed = None
            if args.command != "audit" and not through_spark and not (kafka_sources and not folder.exists()):
                # the first of two listings: a file that changes before landing's is still being written
                listed = landing.listing(folder)
            last_run = last_run_record(args, target, held, bool(kafka_sources), listed)
            if last_run and unchanged(last_run, progress):
                progress.step("OK")
                return EXIT_OK
            parse_project(args, target)
            folder, first_listing = start_spark(args, target, held, progress, kafka_sources)
            if args.command == "audit":
                return _audit(args, target, progress)
            run_once(args, target, folder, kafka_sources, progress, first_listing or listed, last_run)
        progress.step("OK")
        return EXIT_OK
    except RunnerError as exc:
        progress.step(f"FAILED: {exc}")
        return exc.exit_code


def timed_out(seconds: float, where: str) -> str:
    """What a run abandoned at --timeout says (runner/run/watchdog.py Deadline)."""
    return (f"FAILED: the run did not finish within --timeout {seconds:g} s; it was at {where}. Abandoned as a kill "
            "would: nothing of it is half-applied, and the next run applies what it had not recorded. If it hung (a "
            "query that cannot finish, a frozen JVM or file system), find why before the next run; if it was only "
            "slow, raise --timeout")


def abandoner(target, held: RunnerLock, progress):
    """abandon(line, exit code): ends this process at once as a kill would (runner/run/watchdog.py
    abandon): the run's own JVM killed, or, on Spark Connect, the session's statements interrupted;
    on a Thrift server a statement still running there is not ours to stop."""

    def stop_spark() -> str | None:
        if target.owns_jvm:
            return held.kill_jvm()
        if target.remote:
            return _interrupt_connect(target)
        return (f"target {target.name} runs its statements on the server at {target.address}: one still running there "
                "may still commit; cancel it there before the next run")

    return lambda line, code: abandon(progress, line, stop_spark, held.release, code)


def _interrupt_connect(target) -> str:
    """Interrupts the Spark Connect session's statements (at most 10 s: a server that does not answer is left)."""
    from pyspark.sql import SparkSession

    said: list[str] = []

    def interrupt() -> None:
        session = SparkSession.getActiveSession()
        if session is not None:
            said.append(f"interrupted {len(session.interruptAll())} statement(s) on Spark Connect {target.remote}")

    worker = threading.Thread(target=interrupt, daemon=True)
    worker.start()
    worker.join(10)
    return said[0] if said else f"Spark Connect {target.remote} did not answer the interruption within 10 s"


def parse_project(args, target) -> None:
    """Parses the project before Spark starts, so a project that does not parse (a declaration dbt
    refuses, a model that does not compile) is refused with dbt's whole message before anything
    lands (UsageError). The parse is kept for the run (runner/run/dbt.py: the same project files,
    target and vars parse once per process)."""
    Dbt(args.project_dir, target.name, _dbt_vars(args, target)).parse()


def _dbt_vars(args, target) -> dict[str, str]:
    """The vars of a command's dbt invocations: the raw schema; an audit's checks over whole tables."""
    return {"cdc_raw_schema": target.raw_schema, **({"cdc_checks": "all"} if args.command == "audit" else {})}


def unchanged(last_run: LastRun, progress, resident: bool = False) -> bool:
    """True when nothing changed since the last successful plain run (said, with its notes, which
    are still true); otherwise its record is forgotten (a run that does not succeed leaves none)."""
    if recorded := last_run.unchanged_since():
        progress.step(f"nothing new landed since the run that finished at {recorded['finished_at']}, and "
                      "the warehouse and the project are as it left them: nothing to build "
                      f"({'no Spark job' if resident else 'Spark not started'})")
        for line in recorded.get("notes") or []:
            progress.step(line)
        return True
    last_run.forget()
    return False


def start_spark(args, target, held: RunnerLock, progress, kafka_sources: list) -> tuple[Folder, dict | None]:
    """Starts the target's SparkSession (a session target; dbt-spark's session method reuses it),
    recording its JVM in the lock; returns the landing folder (a URI on a session target is listed
    through Hadoop in that session, runner/sources/folders.py) and, for such a URI, its first
    listing."""
    folder = open_folder(_landing_dir(args), hadoop=target.owns_jvm)
    if target.method != "session":
        progress.step(f"target {target.name}: sending SQL to Spark through dbt-spark method {target.method}")
        return folder, None
    if stopped := held.stop_orphan_jvm():
        progress.step(stopped)
    master = target.spark_conf.get("spark.master", "local")
    on = f", Spark Connect {target.remote}" if target.remote else "" if master.startswith("local") else f", master {master}"
    progress.step(f"starting Spark (target {target.name}{on})")
    spark = create_session(target, args.project_dir)
    if not target.remote:  # a Connect session's JVM is the server's
        held.record_jvm(spark._jvm.java.lang.ProcessHandle.current().pid())
    if args.command in ("run", "serve") and is_uri(_landing_dir(args)) and target.owns_jvm:
        folder = open_folder(_landing_dir(args), spark)
        return folder, (landing.listing(folder) if folder.exists() or not kafka_sources else None)
    return folder, None


def run_once(args, target, folder: Folder, kafka_sources: list, progress, listed: dict | None,
             last_run: LastRun | None, rows: list | None = None) -> list[dict]:
    """One run of the pipeline with the command line's options (run_pipeline); records the
    fingerprint of a successful plain run (last_run). Returns its summary rows, none when it had
    nothing to do (`rows` receives them in any case, also when the run fails after recording them)."""
    notes: list[str] = []
    summary = run_pipeline(
        args.project_dir, target, folder,
        select=getattr(args, "select", []), full_refresh=getattr(args, "full_refresh", False),
        restage=getattr(args, "restage", False),
        upper_lsn=getattr(args, "upper_lsn", None), strict=getattr(args, "strict", False), progress=progress,
        min_headroom=getattr(args, "min_headroom", None),
        kafka_sources=kafka_sources, accept_kafka_gap=getattr(args, "accept_kafka_gap", []), listed=listed,
        notes=notes, rows=rows,
    )
    if last_run:
        last_run.remember(notes)
    return summary


class Resident:
    """What `serve` runs in its warm process (runner/run/serve.py), also driven by the benchmark's
    resident phases: the landing folder's listing, one run as `run` makes it (a run that finds
    nothing new since the last successful one takes the fingerprint and starts no Spark job), and
    whether the SparkSession still answers."""

    def __init__(self, args, target, held: RunnerLock, folder: Folder, kafka_sources: list, progress):
        self.args, self.target, self.held, self.folder = args, target, held, folder
        self.kafka_sources, self.progress = kafka_sources, progress

    def listing(self) -> dict | None:
        return None if self.kafka_sources and not self.folder.exists() else landing.listing(self.folder)

    def run(self, listed: dict | None) -> tuple[str, list[dict], str]:
        """One run: (status, its summary rows, why it failed or '')."""
        last_run = last_run_record(self.args, self.target, self.held, bool(self.kafka_sources), listed)
        if last_run and unchanged(last_run, self.progress, resident=True):
            return "nothing_to_do", [], ""
        rows: list[dict] = []
        try:
            summary = run_once(self.args, self.target, self.folder, self.kafka_sources, self.progress, listed, last_run, rows)
        except PipelineFailed as exc:  # what it applied counts, as the ledger's row says
            return "failed", rows, str(exc)
        return ("succeeded" if summary else "nothing_to_do"), rows, ""

    def maintain(self, yield_to):
        """A maintenance pass between runs (runner/run/maintain.py), yielding to a run that falls due."""
        from runner.run.maintain import run_pass

        dbt = Dbt(self.args.project_dir, self.target.name, _dbt_vars(self.args, self.target),
                  activity=self.progress.activity, node_log=self.progress.dbt_nodes)
        self.progress.step("maintenance pass: reading the tables' figures")
        result = run_pass(dbt, self.args.project_dir, self.target.raw_schema, self.progress, yield_to=yield_to)
        if not result.left:
            self.progress.step(f"maintenance pass done: {len(result.done)} table(s) maintained, the others within their "
                               "thresholds")
        return result

    def alive(self) -> bool:
        if not self.target.owns_jvm:
            return True
        from pyspark.sql import SparkSession

        try:
            return SparkSession.getActiveSession().sql("select 1").collect()[0][0] == 1
        except Exception:  # noqa: BLE001 - a session that cannot answer is gone, whatever the error
            return False


def _serve(args, target, held: RunnerLock, kafka_sources: list, progress) -> int:
    """`serve`: Spark started once, then runner/run/serve.py's loop of runs."""
    from runner.project.config import tracked_table_declarations
    from runner.run.serve import serve

    folder, _ = start_spark(args, target, held, progress, kafka_sources)
    resident = Resident(args, target, held, folder, kafka_sources, progress)
    watch = None
    if kafka_sources:  # a run also starts as soon as a source's end offsets move
        from pyspark.sql import SparkSession

        watch = kafka.EndOffsets(SparkSession.getActiveSession(), kafka_sources)
    try:
        return serve(args, progress, resident.listing, resident.run, resident.alive, offsets=watch and watch.poll,
                     abandon=abandoner(target, held, progress), tables=len(tracked_table_declarations(args.project_dir)),
                     maintain=resident.maintain)
    finally:
        if watch:
            watch.close()


def last_run_record(args, target, held: RunnerLock, reads_kafka: bool, listed: dict | None = None) -> LastRun | None:
    """The record of the last successful plain run, for a plain `run` of a session target that
    reads no Kafka source (only a Kafka client can tell whether a topic has new records; docs/operations.md
    "The runner"; `listed`: the run's first listing of the landing folder, which the record's
    fingerprint reuses). Other runs get None, and delete any record: they may change the marts."""
    if (not target.owns_jvm or args.command == "audit" or is_uri(_landing_dir(args))
            or is_uri(target.spark_conf.get("spark.sql.warehouse.dir", ""))):
        return None
    last_run = LastRun(held.path.with_name("last_run.json"), args.project_dir, _landing_dir(args), target, listed)
    if args.command == "serve" and not reads_kafka:
        return last_run
    if args.command == "run" and not (args.full_refresh or args.restage or args.select or args.upper_lsn or reads_kafka):
        return last_run
    last_run.forget()
    return None


def _maintain(args, target, progress) -> int:
    """`maintain`: one maintenance pass (runner/run/maintain.py); `status`: what one would do, and
    each table's figures."""
    from runner.run import maintain

    dbt = Dbt(args.project_dir, target.name, _dbt_vars(args, target), activity=progress.activity,
              node_log=progress.dbt_nodes)
    dry = args.command == "status"
    progress.step("reading the tables' figures" + ("" if dry else ": maintaining those past their thresholds"))
    result = maintain.run_pass(dbt, args.project_dir, target.raw_schema, progress, dry_run=dry)
    report.print_table(maintain.status_table(result))
    if dry:
        due = [t for t in result.tasks if not t.empty]
        progress.step(f"{len(due)} table(s) due for maintenance (see 'due' above): python -m runner maintain does it"
                      if due else "no table is due for maintenance")
    else:
        progress.step(f"maintained {len(result.done)} table(s); the others were within their thresholds")
    progress.step("OK")
    return EXIT_OK


def _audit(args, target, progress) -> int:
    """`dbt test` over whole tables (var cdc_checks all, tag cdc_audit included): the check a
    normal run scopes to its batch, run on demand (docs/operations.md "Checks: batch and audit")."""
    dbt = Dbt(args.project_dir, target.name, _dbt_vars(args, target), activity=progress.activity,
              node_log=progress.dbt_nodes)
    progress.step("dbt test over whole tables (audit)")
    failed = failures(dbt.build(list(args.select), False, command="test"))
    if failed:
        raise PipelineFailed(f"audit: {len(failed)} test(s) failed ({'; '.join(failed[:3])}); see the log above")
    progress.step("audit passed: every data test holds on the whole tables")
    progress.step("OK")
    return EXIT_OK


def _pairs(items: list[str], option: str, form: str) -> dict[str, str]:
    pairs = {}
    for item in items:
        left, _, right = item.partition("=")
        if not left.strip() or not right.strip():
            raise UsageError(f"{option} takes {form}; got {item!r}")
        pairs[left.strip()] = right.strip()
    return pairs


def _init(args, progress) -> int:
    """Removes the demo's tables (declared with `demo: true`) from the project, once the demo's
    data is gone (docs/tables.md "Your own tables")."""
    from runner.project.config import tracked_table_declarations
    from runner.project.init import remove_tables

    demo = [name for name, t in tracked_table_declarations(args.project_dir).items() if t.demo]
    if not demo:
        progress.step("no demo table is declared (init ran before): nothing to remove")
        progress.step("OK")
        return EXIT_OK
    left = [p for p in (args.project_dir / "landing", state_dir(args.project_dir)) if p.exists()]
    if left:
        raise UsageError(f"{' and '.join(p.as_posix() for p in left)} still hold(s) the demo's data: its simulated "
                         "lsn_time_mapping and marts would mix with your tables'. Move any export of your own out of "
                         "landing/, remove the demo's data (`make clean`), then run init again")
    for line in remove_tables(args.project_dir, demo):
        progress.step(f"removed {line}")
    progress.step("kept: the package (macros, the shared models stg_ces__events, stg_debezium__events, the "
                  "cdc_metadata staging, cdc_quarantine: they build nothing until a table of theirs is declared), "
                  "the runner and the settings in dbt_project.yml")
    progress.step("OK: next, land your CDC metadata exports and run `python -m runner scaffold` "
                  "(docs/tables.md \"Your own tables\")")
    return EXIT_OK


def _scaffold(args, progress) -> int:
    from runner.project import scaffold

    keys = {table: [c.strip() for c in columns.split(",") if c.strip()]
            for table, columns in _pairs(args.key, "--key", "TABLE=COLUMN[,COLUMN]").items()}
    names = _pairs(args.name, "--name", "SOURCE=NAME")
    landing_dir = _landing_dir(args)
    if not is_uri(landing_dir):
        landing.discover(landing_dir)  # a missing landing folder is a usage error: fail before Spark
    progress.step(f"reading the CDC metadata exports in {display(str(landing_dir))}/cdc_metadata")
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()  # a caller's session (a notebook, the tests) is used, not stopped
    spark = active or create_file_writer_session()
    try:
        lines = scaffold.scaffold(spark, args.project_dir, landing_dir, args.tables, keys, names, tenants=args.tenants)
    finally:
        if active is None:
            spark.stop()
    for line in lines:
        progress.step(line)
    if any(line.endswith(": not written") for line in lines):
        raise PipelineFailed("some tables were not scaffolded (see above): land the missing metadata or pass --key")
    progress.step("OK: review the changes (git diff), then run the pipeline")
    return EXIT_OK
