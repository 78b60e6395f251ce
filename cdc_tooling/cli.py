"""`python -m cdc_tooling`: the demo, the simulated-data generator and the benchmark.

They build on the runner (`python -m runner`), which never imports this package.

Exit codes as the runner's: 0 success; 1 a model or test failed; 2 usage, configuration or
infrastructure error.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from cdc_simulator.tables import tracked_tables
from runner.errors import EXIT_OK, RunnerError, UsageError
from runner.run import cli as runner_cli
from runner.run import report
from runner.sources.folders import display, is_uri
from runner.spark.profile import load_target
from runner.spark.session import create_file_writer_session, create_session

PROJECT_DIR = runner_cli.PROJECT_DIR


def _parser() -> argparse.ArgumentParser:
    from cdc_tooling.bench import BenchConfig

    parser = argparse.ArgumentParser(prog="python -m cdc_tooling", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)

    common = runner_cli.common_arguments

    demo = sub.add_parser("demo", help="generate demo landing data (if absent) and run the pipeline on it")
    common(demo)
    demo.add_argument("--kafka", default=None, metavar="HOST:PORT",
                      help="produce the demo's CES and Debezium events to this Kafka broker and read them from there "
                           "(make kafka-up starts one)")
    demo.add_argument("--wait", type=float, default=0, metavar="SECONDS",
                      help="when another runner holds the warehouse, wait up to SECONDS for it (default: exit 2 at once)")
    gen = sub.add_parser("generate", help="write simulated landing data for the tracked tables")
    common(gen)
    gen.add_argument("--transactions", type=int, default=400)
    gen.add_argument("--batches", type=int, default=2)
    gen.add_argument("--seed", type=int, default=7)

    defaults = BenchConfig()
    bench = sub.add_parser("bench", help="measure initial, incremental, full-refresh and no-op runs against the copy floor "
                                          "and a plain PySpark recompute of the same marts")
    bench.add_argument("--project-dir", type=Path, default=PROJECT_DIR, help="the dbt project (default: this one)")
    bench.add_argument("--changes", type=int, default=defaults.changes, help="changes in the initial load (all tables)")
    bench.add_argument("--keys", type=int, default=defaults.keys, help="keys (all tables)")
    bench.add_argument("--tables", type=int, default=defaults.tables)
    bench.add_argument("--columns", type=int, default=defaults.columns, help="non-key columns per table")
    bench.add_argument("--width", type=int, default=defaults.width, help="width of the nvarchar columns")
    bench.add_argument("--rows-per-transaction", type=int, default=defaults.rows_per_transaction,
                       help="changes per table per transaction")
    bench.add_argument("--batch-fraction", type=float, default=defaults.batch_fraction,
                       help="incremental batch size as a fraction of the initial load")
    bench.add_argument("--state-factor", type=int, default=defaults.state_factor,
                       help="how many times larger the second state is")
    bench.add_argument("--seed", type=int, default=defaults.seed)
    bench.add_argument("--many-tables", type=int, default=defaults.many_tables,
                       help="tables declared in the many-tables phases (a batch on 2 of them, then on all)")
    bench.add_argument("--many-changes", type=int, default=defaults.many_changes, help="changes per table there")
    bench.add_argument("--many-keys", type=int, default=defaults.many_keys, help="keys per table there")
    bench.add_argument("--many-batch", type=int, default=defaults.many_batch, help="changes per table in their batches")
    bench.add_argument("--many-repeats", type=int, default=defaults.many_repeats,
                       help="runs of each timed many-tables phase (its time is their median)")
    bench.add_argument("--soak-runs", type=int, default=defaults.soak_runs,
                       help="small runs of the resident runner's soak (resources compared at run 20 and at the end)")
    bench.add_argument("--estate-databases", type=int, default=defaults.estate_databases,
                       help="databases of the estate phases (docs/tables.md \"Several databases\")")
    bench.add_argument("--estate-tables", type=int, default=defaults.estate_tables, help="tables per database there")
    bench.add_argument("--parse-project", default=f"{defaults.parse_databases}x{defaults.parse_tables}", metavar="DBxTABLES",
                       help="the databases and tables per database of the project whose parse is timed")
    bench.add_argument("--aging-runs", type=int, default=defaults.aging_runs,
                       help="generated runs per variant of the aging phase (cdc_tooling/aging.py)")
    bench.add_argument("--aging-auto-runs", type=int, default=defaults.aging_auto_runs,
                       help="generated runs with Delta's auto compaction (0: that variant left out)")
    bench.add_argument("--aging-tables", type=int, default=defaults.aging_tables, help="tables of the aging phase's project")
    bench.add_argument("--aging-keys", type=int, default=defaults.aging_keys, help="keys per table there")
    bench.add_argument("--aging-pass-every", type=int, default=defaults.aging_pass_every,
                       help="generated runs between two maintenance passes (12: hourly at five-minute runs)")
    bench.add_argument("--aging-variants", nargs="+", default=list(defaults.aging_variants), metavar="VARIANT",
                       help="the aging phase's copies: maintained, none, auto (default: all three, in that order)")
    bench.add_argument("--phases", nargs="+", default=list(defaults.phases), metavar="PHASE",
                       help="the phases to run: core, events (needs core), big, many, resident, noop, estate (default: "
                            "those), aging (hours: cdc_tooling/aging.py)")
    bench.add_argument("--work-dir", type=Path, default=PROJECT_DIR / "bench/work", help="scratch folder (wiped)")
    bench.add_argument("--results-dir", type=Path, default=PROJECT_DIR / "bench/results")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    progress = report.Progress(dbt_nodes=getattr(args, "verbose", False))
    try:
        args.project_dir = args.project_dir.resolve()
        if args.command == "bench":
            return _bench(args, progress)
        target = load_target(args.project_dir, args.target)
        if args.landing and is_uri(args.landing):
            raise UsageError(f"{args.command} writes its landing data to a local folder; --landing {display(args.landing)} "
                             "is a URI: generate into a local folder and copy it there")
        landing_dir = Path(args.landing or args.project_dir / "landing").resolve()
        if args.command == "generate":
            _generate(args.project_dir, target, landing_dir, progress, args.transactions, args.batches, args.seed)
            return EXIT_OK
        # demo: the demo's history (once), then a plain runner run over it, on the demo's tables only: it
        # would write simulated changes of a user's tables into their landing folder
        tables = tracked_tables(args.project_dir)
        if not tables or not all(t.demo for t in tables):
            theirs = ", ".join(t.name for t in tables if not t.demo) or "none"
            raise UsageError(f"the demo runs on the demo's tables only (declared `demo: true`); this project declares "
                             f"other tables ({theirs}) or none (`python -m runner init` removed them): run the demo in "
                             "a fresh clone of the project")
        if not (landing_dir / "change_tables").exists():
            _generate(args.project_dir, target, landing_dir, progress, 400, 2, 7, kafka=args.kafka)
        sources = None
        if args.kafka:
            from cdc_simulator import demo_data

            sources = demo_data.kafka_sources(args.kafka, args.project_dir)
        run = ["run", "--project-dir", str(args.project_dir), "--landing", str(landing_dir), "--wait", str(args.wait),
               *(["--verbose"] if args.verbose else [])]
        code = runner_cli.main(run + (["--target", args.target] if args.target else []), kafka_sources=sources,
                               clock=progress.started)
        if code == EXIT_OK:
            progress.step("demo done: query the marts, e.g. `select * from cdc.customers_current`")
        return code
    except RunnerError as exc:
        progress.step(f"FAILED: {exc}")
        return exc.exit_code


def _dimensions(text: str) -> tuple[int, int]:
    """`100x10`: databases and tables per database."""
    first, _, second = text.lower().partition("x")
    if not (first.isdigit() and second.isdigit()):
        raise UsageError(f"--parse-project takes DATABASESxTABLES, e.g. 100x10; got {text!r}")
    return int(first), int(second)


def _bench(args, progress) -> int:
    from cdc_tooling import bench

    cfg = bench.BenchConfig(
        changes=args.changes, keys=args.keys, tables=args.tables, columns=args.columns, width=args.width,
        rows_per_transaction=args.rows_per_transaction, batch_fraction=args.batch_fraction,
        state_factor=args.state_factor, seed=args.seed, work_dir=args.work_dir, results_dir=args.results_dir,
        many_tables=args.many_tables, many_changes=args.many_changes, many_keys=args.many_keys,
        many_batch=args.many_batch, many_repeats=args.many_repeats, soak_runs=args.soak_runs, phases=tuple(args.phases),
        estate_databases=args.estate_databases, estate_tables=args.estate_tables,
        parse_databases=_dimensions(args.parse_project)[0], parse_tables=_dimensions(args.parse_project)[1],
        aging_runs=args.aging_runs, aging_auto_runs=args.aging_auto_runs, aging_tables=args.aging_tables,
        aging_keys=args.aging_keys, aging_pass_every=args.aging_pass_every, aging_variants=tuple(args.aging_variants),
    )
    result = bench.run_bench(cfg, args.project_dir, progress)
    bench.print_report(result)
    path = bench.write_report(result, cfg.results_dir)
    progress.step(f"bench report written to {path}")
    return EXIT_OK


def _generate(project_dir: Path, target, landing_dir: Path, progress, transactions: int, batches: int, seed: int,
              kafka: str | None = None) -> None:
    from cdc_simulator import demo_data

    progress.step(f"writing simulated landing data to {landing_dir}")
    if kafka is None:  # files need no Spark (Parquet is written with pyarrow): the run starts it
        demo_data.generate(None, project_dir, landing_dir, transactions=transactions, batches=batches, seed=seed)
        return
    # events go to Kafka through Spark's Kafka sink: the target's session (the run then reuses it),
    # or for a cluster target a local one used for nothing else (the pipeline then runs on the cluster)
    local = target.method == "session"
    spark = create_session(target, project_dir) if local else create_file_writer_session()
    try:
        demo_data.generate(spark, project_dir, landing_dir, transactions=transactions, batches=batches, seed=seed,
                           kafka=kafka)
    finally:
        if not local:
            spark.stop()
