"""`python -m runner`: run the pipeline, audit the tables, or scaffold declarations.

The demo, the data generator and the benchmark are `python -m cdc_tooling`.

Exit codes: 0 success; 1 a model or test failed (or rows were quarantined with --strict);
2 usage, configuration or infrastructure error. The last line says what failed and what to do.
"""

from __future__ import annotations

import argparse
import uuid
from datetime import datetime, timezone
from pathlib import Path

from runner import kafka, landing, report
from runner.dbt import Dbt
from runner.errors import EXIT_OK, InfrastructureError, PipelineFailed, RunnerError, UsageError
from runner.lock import RunnerLock, describe_previous, lock_path
from runner.profile import load_target
from runner.project import check_model_files
from runner.session import create_file_writer_session, create_session
from runner.unchanged import LastRun

PROJECT_DIR = Path(__file__).resolve().parent.parent


def common_arguments(p: argparse.ArgumentParser) -> None:
    """--project-dir, --target and --landing (cdc_tooling's commands take them too)."""
    p.add_argument("--project-dir", type=Path, default=PROJECT_DIR, help="the dbt project (default: this one)")
    p.add_argument("--target", default=None, help="profiles.yml target (default: the profile's, 'local')")
    p.add_argument("--landing", type=Path, default=None, help="landing folder (default: <project>/landing)")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m runner", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    common = common_arguments

    run = sub.add_parser("run", help="land new files, build the marts for one LSN window, report")
    common(run)
    run.add_argument("--full-refresh", action="store_true", help="rebuild the marts from all landed changes")
    run.add_argument("--select", nargs="+", default=[], help="dbt selection (default: everything)")
    run.add_argument("--upper-lsn", default=None, help="cap the run's upper LSN (any LSN form)")
    run.add_argument("--strict", action="store_true", help="exit 1 when this batch quarantined rows")
    run.add_argument("--accept-kafka-gap", nargs="+", default=[], metavar="SOURCE",
                     help="Kafka sources whose retention gap (or recreated topic) to skip, once a snapshot is landed")

    audit = sub.add_parser("audit", help="run every data test on whole tables (a normal run checks only its batch)")
    common(audit)
    audit.add_argument("--select", nargs="+", default=[], help="dbt selection of the tests' models (default: everything)")
    for p in (run, audit):
        p.add_argument("--wait", type=float, default=0, metavar="SECONDS",
                       help="when another runner holds the warehouse, wait up to SECONDS for it (default: exit 2 at once)")

    scaffold = sub.add_parser("scaffold", help="declare captured tables (and write their model files and YAML docs) "
                                               "from the landed cdc.captured_columns and cdc.change_tables exports")
    common(scaffold)
    scaffold.add_argument("--tables", nargs="+", default=[], help="only these tables (names or capture instances)")
    scaffold.add_argument("--key", nargs="+", default=[], metavar="TABLE=COLUMN[,COLUMN]",
                          help="the key of a table whose metadata does not give it")

    return parser


def _batch_id() -> str:
    return datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S%fZ") + "-" + uuid.uuid4().hex[:6]


def run_pipeline(project_dir: Path, target, landing_dir: Path, *, select: list[str] = (),
                 full_refresh: bool = False, upper_lsn: str | None = None, strict: bool = False,
                 progress=None, kafka_sources: list | None = None, accept_kafka_gap: list[str] = ()) -> list[dict]:
    """Lands, builds and reports one run; returns the summary rows (one per tracked table).
    Two dbt invocations on one parse of the project: `run-operation begin_run` lands the new
    files, decides the window and writes the run ledger's row; `dbt build` applies it, and its
    on-run-end hook closes the row (docs/operations.md "The run ledger"). Every step is SQL sent through dbt,
    so it runs on whatever Spark the target names (for a session target, the caller has created
    the SparkSession first), except landing from Kafka sources (default: the project's), which
    appends to the raw table from the session before begin_run (runner/kafka.py). Raises
    PipelineFailed (also when strict and this run's batches quarantined rows, or when a Kafka
    source stopped at a retention gap)."""
    progress = progress or report.Progress()
    batch_id = _batch_id()
    # constant across incremental runs, so one parse serves them (the window is in the ledger)
    dbt = Dbt(project_dir, target.name, {"cdc_raw_schema": target.raw_schema, "cdc_runner": True,
                                         "cdc_checks": "all" if full_refresh else "batch"})
    sources = kafka.sources(project_dir) if kafka_sources is None else kafka_sources
    stopped = _land_kafka(dbt, target, sources, batch_id, accept_kafka_gap, progress) if sources else []
    if sources and not landing_dir.exists():  # a project fed by Kafka alone needs no landing folder
        files = []
        progress.step(f"no landing folder {landing_dir}: no files to land (batch {batch_id})")
    else:
        files = landing.files_to_land(landing_dir)
        progress.step(f"landing new files from {landing_dir} (batch {batch_id})")
    begun = dbt.operation("sqlserver_cdc.begin_run", {
        "files": files, "batch_id": batch_id, "raw_schema": target.raw_schema,
        "upper_lsn": upper_lsn, "force": bool(full_refresh or select), "full_refresh": full_refresh,
        "stopped": stopped,
    }).get("begin_run")
    if begun is None:
        raise InfrastructureError("begin_run reported nothing: is the project's sqlserver_cdc package current?")
    landed = begun["landed"]
    progress.step(f"landed {sum(landed.values())} records from {len(landed)} folders")
    refused = begun.get("refused") or []
    for line in report.landing_lines(begun):
        progress.step(line)
    for channel in begun["channels"]:
        if begun["upper_lsn"].get(channel):
            progress.step(f"window ({channel}): changes up to LSN 0x{begun['upper_lsn'][channel]} (one bound for its tables)")
        else:
            progress.step(f"window ({channel}): nothing landed yet to apply")
    if begun["status"] == "nothing_to_do":
        progress.step("nothing new landed and every mart is at its upper bound: nothing to build")
        _refused(refused, stopped)
        return []
    progress.step("dbt build" + (" --full-refresh" if full_refresh else ""))
    reports: dict[str, object] = {}
    # an incremental run checks what it changed; a full refresh audits whole tables (docs/operations.md
    # "Checks: batch and audit")
    # and leaves out seeds already loaded (they only feed data tests)
    exclude = [] if full_refresh else ["tag:cdc_audit"] + (["resource_type:seed"] if begun.get("seeds_loaded") else [])
    failed = dbt.build(list(select), full_refresh, exclude=exclude, reports=reports)
    finished = reports.get("finish_run")
    if finished is None:
        raise PipelineFailed(f"the build ended before its on-run-end hook closed run {batch_id} in the ledger"
                             + (f" ({'; '.join(failed[:3])})" if failed else "") + ": fix the cause and re-run")
    summary = finished.get("tables") or []
    quarantined = sum(int(r["quarantined"]) for r in summary)
    for stream in finished.get("streams") or []:
        progress.step(report.stream_line(stream["channel"], stream))
        quarantined += int(stream["quarantined"])
    report.print_table(report.summary_table(summary))
    if quarantined:
        progress.step(f"{quarantined} landed rows were quarantined in this run's batches: see the cdc_quarantine view "
                      f"(where _batch_id <= '{batch_id}')")
    if failed:
        raise PipelineFailed(
            f"{len(failed)} dbt node(s) failed ({'; '.join(failed[:3])}); watermarks of the affected marts were "
            "not advanced: fix the cause and re-run"
        )
    _refused(refused, stopped)
    if strict and quarantined:
        raise PipelineFailed("rows were quarantined and --strict is set; inspect cdc_quarantine")
    return summary


def _land_kafka(dbt, target, sources: list, batch_id: str, accept_gap, progress) -> list[str]:
    """Lands the Kafka sources' new records (before begin_run, which then sees them as landed);
    returns why sources stopped (retention gaps), each already reported."""
    from pyspark.sql import SparkSession

    spark = SparkSession.getActiveSession()
    if spark is None:
        raise UsageError("Kafka sources are read in the runner's own SparkSession: use a session target")
    dbt.operation("sqlserver_cdc.ensure_raw_table", {"raw_schema": target.raw_schema})
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


def _refused(refused: list[str], stopped: list[str] = ()) -> None:
    if stopped:
        raise PipelineFailed(
            f"{len(stopped)} Kafka partition(s) stopped their source (listed above): it landed nothing, everything "
            "else was landed and applied. Follow the remedy above, then re-run")
    if refused:
        raise PipelineFailed(
            f"{len(refused)} landing file(s) were refused (listed above) and landed nothing; everything else was "
            "landed and applied. Replace each with a complete copy (a refused file was never landed, so the same "
            "name works) and re-run"
        )


def _landing_dir(args) -> Path:
    return (args.landing or args.project_dir / "landing").resolve()


def main(argv: list[str] | None = None, kafka_sources: list | None = None) -> int:
    """The command line; `kafka_sources` replaces the project's (the demo's, cdc_tooling)."""
    args = _parser().parse_args(argv)
    progress = report.Progress()
    try:
        args.project_dir = args.project_dir.resolve()
        if args.command == "scaffold":
            return _scaffold(args, progress)
        target = load_target(args.project_dir, args.target)
        if kafka_sources is None:
            kafka_sources = kafka.sources(args.project_dir) if args.command == "run" else []
        if args.command == "run" and not kafka_sources:
            landing.discover(_landing_dir(args))  # a missing landing folder is a usage error: fail before Spark
        check_model_files(args.project_dir)
        for source in kafka_sources:  # settings and secrets checked before Spark starts
            source.client_options()
        if kafka_sources and target.method != "session":
            raise UsageError(f"target {target.name} uses method {target.method}: Kafka sources are read in the "
                             "runner's own SparkSession, so they need a session target (docs/channels.md \"Reading from Kafka "
                             "and Event Hubs\")")
        with RunnerLock(lock_path(target, args.project_dir), target.name).acquire(args.wait, progress) as held:
            if describe_previous(held):
                progress.step(describe_previous(held))
            if args.command != "audit" and not (kafka_sources and not _landing_dir(args).exists()):
                landing.discover(_landing_dir(args))
            last_run = _last_run(args, target, held, bool(kafka_sources))
            if last_run:
                if recorded := last_run.unchanged_since():
                    progress.step(f"nothing new landed since the run that finished at {recorded['finished_at']}, and "
                                  "the warehouse and the project are as it left them: nothing to build (Spark not started)")
                    progress.step("OK")
                    return EXIT_OK
                last_run.forget()  # a run that does not succeed leaves no record
            if target.method == "session":
                progress.step(f"starting Spark (target {target.name})")
                create_session(target, args.project_dir)  # dbt-spark's session method reuses it
            else:
                progress.step(f"target {target.name}: sending SQL to Spark through dbt-spark method {target.method}")
            if args.command == "audit":
                return _audit(args, target, progress)
            run_pipeline(
                args.project_dir, target, _landing_dir(args),
                select=getattr(args, "select", []), full_refresh=getattr(args, "full_refresh", False),
                upper_lsn=getattr(args, "upper_lsn", None), strict=getattr(args, "strict", False), progress=progress,
                kafka_sources=kafka_sources, accept_kafka_gap=getattr(args, "accept_kafka_gap", []),
            )
            if last_run:
                last_run.remember()
        progress.step("OK")
        return EXIT_OK
    except RunnerError as exc:
        progress.step(f"FAILED: {exc}")
        return exc.exit_code


def _last_run(args, target, held: RunnerLock, reads_kafka: bool) -> LastRun | None:
    """The record of the last successful plain run, for a plain `run` of a session target that
    reads no Kafka source (only a Kafka client can tell whether a topic has new records; docs/operations.md
    "The runner"). Other runs get None, and delete any record: they may change the marts."""
    if target.method != "session" or args.command == "audit":
        return None
    last_run = LastRun(held.path.with_name("last_run.json"), args.project_dir, _landing_dir(args), target)
    if args.command == "run" and not (args.full_refresh or args.select or args.upper_lsn or reads_kafka):
        return last_run
    last_run.forget()
    return None


def _audit(args, target, progress) -> int:
    """`dbt test` over whole tables (var cdc_checks all, tag cdc_audit included): the check a
    normal run scopes to its batch, run on demand (docs/operations.md "Checks: batch and audit")."""
    dbt = Dbt(args.project_dir, target.name, {"cdc_raw_schema": target.raw_schema, "cdc_checks": "all"})
    progress.step("dbt test over whole tables (audit)")
    failed = dbt.build(list(args.select), False, command="test")
    if failed:
        raise PipelineFailed(f"audit: {len(failed)} test(s) failed ({'; '.join(failed[:3])}); see the log above")
    progress.step("audit passed: every data test holds on the whole tables")
    progress.step("OK")
    return EXIT_OK


def _scaffold(args, progress) -> int:
    from runner import scaffold

    keys = {}
    for item in args.key:
        table, _, columns = item.partition("=")
        if not table or not columns:
            raise UsageError(f"--key takes TABLE=COLUMN[,COLUMN]; got {item!r}")
        keys[table] = [c.strip() for c in columns.split(",") if c.strip()]
    landing_dir = _landing_dir(args)
    landing.discover(landing_dir)
    progress.step(f"reading the CDC metadata exports in {landing_dir}/cdc_metadata")
    spark = create_file_writer_session()
    try:
        lines = scaffold.scaffold(spark, args.project_dir, landing_dir, args.tables, keys)
    finally:
        spark.stop()
    for line in lines:
        progress.step(line)
    if any(line.endswith(": not written") for line in lines):
        raise PipelineFailed("some tables were not scaffolded (see above): land the missing metadata or pass --key")
    progress.step("OK: review the changes (git diff), then run the pipeline")
    return EXIT_OK
