"""One SparkSession for the whole test session, with its own metastore and warehouse, and
helpers to run the pipeline and compile macros through the real dbt project."""

from __future__ import annotations

import json
import os
import shutil
import socket
import tempfile
import uuid
from contextlib import ExitStack
from pathlib import Path

import pytest

PROJECT_DIR = Path(__file__).resolve().parent.parent
FIXTURES = Path(__file__).resolve().parent / "fixtures"

_STATE = Path(tempfile.mkdtemp(prefix="sqlserver_cdc_tests_"))
os.environ["SQLSERVER_CDC_STATE_DIR"] = str(_STATE / "state")


@pytest.fixture(autouse=True)
def _environment():
    """Every test starts from the session's environment and leaves it as it found it (a Pipeline
    sets SQLSERVER_CDC_SCHEMA for its runs and dbt compiles; the next test must not inherit it)."""
    saved = dict(os.environ)
    yield
    os.environ.clear()
    os.environ.update(saved)


def _session():
    """The session's SparkSession, as the runner creates it (Delta's jars named one by one). The
    first test to need Spark creates it, whichever that is: a dbt command run before it would
    otherwise create one from the profile's settings alone."""
    from runner.spark.profile import load_target
    from runner.spark.session import create_session

    session = create_session(load_target(PROJECT_DIR, "local"), PROJECT_DIR)
    for key, value in TEST_CONF.items():
        session.conf.set(key, value)
    return session


# The tests' session and the runner processes tests/scenarios.py starts (faults, HDFS, Kafka) run
# with two of Spark's optimizations off, which cost the suite's few hundred small runs more than
# they give (docs/testing.md "Tiers"): generated code (each run sends statements new to its
# process, whose classes Janino would compile first: 12-15% of a scenario) and adaptive query
# execution (it plans each shuffle stage as a job of its own and re-optimizes between them: a
# small run of two tables issued 243 jobs with it and 162 without, and took a tenth less). Spark
# computes the same results either way; the cluster test's server and application and the
# benchmark keep the profile's settings, and the cluster test compares their marts with this
# session's row for row; tests/pipeline/test_session.py turns adaptive execution back on (its
# query stages are what it tests).
TEST_CONF = {"spark.sql.codegen.wholeStage": "false", "spark.sql.codegen.factoryMode": "NO_CODEGEN",
             "spark.sql.adaptive.enabled": "false"}


@pytest.fixture(scope="session")
def spark():
    session = _session()
    yield session
    session.stop()
    shutil.rmtree(_STATE, ignore_errors=True)


class Pipeline:
    """A pipeline in its own schema and landing folder, on the shared session."""

    def __init__(self, spark, schema: str, landing: Path, project_dir: Path = PROJECT_DIR):
        from runner.spark.profile import load_target

        self.spark = spark
        self.schema = schema
        self.landing = landing
        self.project_dir = project_dir
        os.environ["SQLSERVER_CDC_SCHEMA"] = schema
        self.target = load_target(PROJECT_DIR, "local")

    def run(self, **kwargs) -> list[dict]:
        from runner.run.cli import run_pipeline

        os.environ["SQLSERVER_CDC_SCHEMA"] = self.schema
        return run_pipeline(self.project_dir, self.target, self.landing, **kwargs)

    def rows(self, sql: str) -> list[dict]:
        return [r.asDict(recursive=True) for r in self.spark.sql(sql.format(s=self.schema)).collect()]

    def table(self, name: str, order_by: str) -> list[dict]:
        return self.rows(f"select * from {{s}}.{name} order by {order_by}")


def _event_tables() -> tuple[str, ...]:
    """The demo tables fed by CES or Debezium (tests/channels/test_ces.py and tests/channels/test_debezium.py build
    them); the change-table tests leave them out, as their empty marts and tests cost each build
    about a third of its time."""
    from cdc_simulator.tables import tracked_tables

    return tuple(t.name for t in tracked_tables(PROJECT_DIR) if t.channel != "change_tables")


EVENT_TABLES = _event_tables()


@pytest.fixture(scope="session")
def change_tables_project(tmp_path_factory) -> Path:
    """The project with its change-table demo tables only, documented and tested as in the demo."""
    return copy_project(tmp_path_factory.mktemp("change_tables") / "project", {}, drop=EVENT_TABLES)


@pytest.fixture
def pipeline(spark, tmp_path, change_tables_project):
    """A pipeline on the change-table demo tables."""
    schema = "t_" + uuid.uuid4().hex[:8]
    landing = tmp_path / "landing"
    landing.mkdir()
    return Pipeline(spark, schema, landing, project_dir=change_tables_project)


def same_rows(pipeline: Pipeline, left: str, right: str, columns: list[str]) -> int:
    """Asserts two models hold the same rows over `columns` (duplicates counted; the first column
    identifies a key in the message) and returns the row count."""
    select = ", ".join(columns)
    for a, b in ((left, right), (right, left)):
        extra = pipeline.rows(f"select {select} from {{s}}.{a} except all select {select} from {{s}}.{b}")
        if extra:
            key = columns[0]
            near = pipeline.rows(f"select {select} from {{s}}.{b} where {key} = {extra[0][key]!r}")
            raise AssertionError(f"{a} has rows {b} lacks: {extra[:3]}; {b} has for that key: {near}")
    return pipeline.rows(f"select count(*) as n from {{s}}.{left}")[0]["n"]


def table_scans(spark, after_execution: int, table: str) -> list[dict]:
    """The scans of `table`'s data files (not its Delta log) by the Spark SQL executions after
    `after_execution`, with the rows and files each read, from Spark's SQL status store."""
    spark.sparkContext._jsc.sc().listenerBus().waitUntilEmpty()
    store = spark._jsparkSession.sharedState().statusStore()
    executions = store.executionsList()
    scans = []
    for i in range(executions.size()):
        execution_id = executions.apply(i).executionId()
        if execution_id <= after_execution:
            continue
        values = {}
        entries = store.executionMetrics(execution_id).toSeq()
        for j in range(entries.size()):
            values[entries.apply(j)._1()] = entries.apply(j)._2()
        nodes = store.planGraph(execution_id).allNodes()
        for j in range(nodes.size()):
            node = nodes.apply(j)
            # a scan of the table's data files: `FileScan parquet spark_catalog.<schema>.<table>[...`
            if not node.name().startswith("Scan") or f".{table}[" not in node.desc():
                continue
            metrics = node.metrics()
            read = {}
            for k in range(metrics.size()):
                metric = metrics.apply(k)
                if metric.name() in ("number of output rows", "number of files read"):
                    read[metric.name()] = int(str(values.get(metric.accumulatorId(), "0")).replace(",", ""))
            schema = node.desc().partition("ReadSchema: ")[2]
            scans.append({"execution": execution_id, "columns": schema, **read})
    return scans


def last_execution(spark) -> int:
    spark.sparkContext._jsc.sc().listenerBus().waitUntilEmpty()
    executions = spark._jsparkSession.sharedState().statusStore().executionsList()
    return max((executions.apply(i).executionId() for i in range(executions.size())), default=-1)


def assert_raw_read_by_batch(pipeline: Pipeline, after_execution: int) -> dict:
    """Asserts every scan of the raw landing table since `after_execution` (a run: landing,
    window, staging, summary) read only the records of the run's own batch (Delta skipped the
    files of earlier batches), and returns the run's ledger row."""
    run = pipeline.rows("select * from {s}.cdc_runs order by run_id desc limit 1")[0]
    landed = sum(run["landed"].values())
    records = pipeline.rows("select count(*) as n from {s}_raw.landed_rows where landing_kind = 'landed_files'")[0]["n"]
    scans = table_scans(pipeline.spark, after_execution, "landed_rows")
    # the landed-files check reads the files' records (one row per landed file), the rest the batch
    checks = [s for s in scans if s["columns"].startswith("struct<_source_file:string,_source_size:bigint")]
    assert checks and all(s["number of output rows"] <= records for s in checks), (records, checks)
    scans = [s for s in scans if s not in checks]
    assert scans and all(s["number of output rows"] <= landed for s in scans), (landed, scans)
    assert pipeline.rows("select count(*) as n from {s}_raw.landed_rows")[0]["n"] > landed
    return run


# parsed projects of compile_sql, by what a parse depends on (files, target, environment)
_COMPILE_MANIFESTS: dict[tuple, object] = {}


def compile_sql(sql: str, vars: dict | None = None, project_dir: Path = PROJECT_DIR) -> str:
    """Compiles a Jinja SQL snippet in the project (its macros available) to plain Spark SQL. The
    project is parsed once per set of project files and environment (the schema among it) and
    the parse reused, as the runner reuses it: vars are read when the snippet renders."""
    from dbt.cli.main import dbtRunner

    from runner.run.dbt import Dbt

    _session()  # dbt's compile connects: to the runner's session, never one of its own
    dbt = Dbt(project_dir, "local")
    key = dbt._manifest_key()
    if key not in _COMPILE_MANIFESTS:
        _COMPILE_MANIFESTS[key] = dbt.parse()
    args = ["--quiet", "--log-level", "none", "compile", "--inline", sql, "--project-dir", str(project_dir),
            "--profiles-dir", str(project_dir), "--target", "local"]
    if vars:
        args += ["--vars", json.dumps(vars)]
    result = dbtRunner(manifest=_COMPILE_MANIFESTS[key]).invoke(args)
    if not result.success:
        cause = result.exception.__context__ or result.exception
        raise AssertionError(f"dbt compile failed: {cause}")
    return result.result.results[0].node.compiled_code


@pytest.fixture(scope="session")
def render(spark):
    """Compile a Jinja SQL snippet and run it on the shared session; rows as dicts."""

    def _render(sql: str, vars: dict | None = None, project_dir: Path = PROJECT_DIR) -> list[dict]:
        return [r.asDict(recursive=True) for r in spark.sql(compile_sql(sql, vars, project_dir)).collect()]

    return _render


@pytest.fixture(scope="session")
def hdfs(tmp_path_factory):
    """One HDFS mini-cluster (cdc_tooling/hdfs.py) on free loopback ports for the session, started
    by the first test that needs it: each test works in a folder of its own on it."""
    from cdc_tooling.hdfs import Hdfs, down, up

    h = Hdfs(tmp_path_factory.mktemp("hdfs"), *free_ports(2))
    up(h)
    try:
        yield h
    finally:
        down(h)


def free_ports(count: int, host: str = "127.0.0.1") -> list[int]:
    """Ports free on the loopback interface now (for a test's own cluster or broker)."""
    with ExitStack() as stack:
        sockets = [stack.enter_context(socket.socket()) for _ in range(count)]
        for s in sockets:
            s.bind((host, 0))
        return [s.getsockname()[1] for s in sockets]


def copy_project(destination: Path, extra_tables: dict[str, dict], replace: bool = False,
                 drop: tuple[str, ...] = ()) -> Path:
    """A copy of the project with more tracked tables declared and their model files added (with
    replace, instead of the demo tables; drop removes the named demo tables)."""
    from runner.project.init import copy_project as copy

    return copy(PROJECT_DIR, destination, extra_tables, replace=replace, drop=drop)


DURATIONS = PROJECT_DIR / "logs" / "test-durations.txt"


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    """Every test's duration (setup, call and teardown together), slowest first, and the total, in
    logs/test-durations.txt: what a change costs the suite (docs/testing.md)."""
    seconds: dict[str, float] = {}
    for reports in terminalreporter.stats.values():
        for report in reports:
            if getattr(report, "when", None) in ("setup", "call", "teardown") and hasattr(report, "duration"):
                seconds[report.nodeid] = seconds.get(report.nodeid, 0.0) + report.duration
    if not seconds:
        return
    total = sum(seconds.values())
    DURATIONS.parent.mkdir(exist_ok=True)
    lines = [f"{s:9.2f} s  {nodeid}" for nodeid, s in sorted(seconds.items(), key=lambda item: -item[1])]
    DURATIONS.write_text(f"{len(seconds)} tests, {total:.1f} s in tests ({total / 60:.1f} min)\n" + "\n".join(lines) + "\n")
    terminalreporter.write_line(f"test durations: {len(seconds)} tests, {total:.1f} s ({total / 60:.1f} min) in "
                                f"tests; each test's in {DURATIONS.relative_to(PROJECT_DIR)}")
