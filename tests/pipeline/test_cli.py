"""The runner's command line: usage and configuration errors exit 2 with one clear line,
before Spark starts."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.conftest import PROJECT_DIR


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "runner", *args], cwd=PROJECT_DIR, capture_output=True,
                          text=True, timeout=120, check=False)


def test_missing_landing_folder_is_a_usage_error(tmp_path):
    result = _run("run", "--landing", str(tmp_path / "nowhere"))
    assert result.returncode == 2
    last = result.stdout.strip().splitlines()[-1]
    assert "FAILED: landing folder" in last and "does not exist; pass --landing DIR" in last


def test_a_uri_landing_folder_on_a_server_target_is_listed_through_fsspec_and_never_with_a_secret():
    """Before the lock or Spark: a target whose Spark runs elsewhere lists a URI through fsspec, so
    an hdfs:// URI is refused with its WebHDFS remedy (exit 2) and an unreachable folder stops the
    run naming it; a URI with a secret in it is refused without printing the secret."""
    for target in ("cluster", "connect"):
        result = _run("run", "--target", target, "--landing", "hdfs://127.0.0.1:1/landing")
        assert result.returncode == 2
        assert ("FAILED: landing folder hdfs://127.0.0.1:1/landing: a target whose Spark runs elsewhere (a Thrift or "
                "http server, Spark Connect) lists a URI through fsspec") in result.stdout.strip().splitlines()[-1]
        assert "name the same folder as webhdfs://namenode:http-port/..." in result.stdout
        result = _run("run", "--target", target, "--landing", "webhdfs://127.0.0.1:1/landing")
        assert result.returncode == 2 and "starting Spark" not in result.stdout and "sending SQL" not in result.stdout
        assert "FAILED: landing folder webhdfs://127.0.0.1:1/landing: cannot list it:" in result.stdout
    result = _run("run", "--landing", "s3a://AKIAEXAMPLE:TopSecretValue@bucket/landing")
    assert result.returncode == 2 and "starting Spark" not in result.stdout
    assert "FAILED: landing folder s3a://bucket/landing: its URI holds a secret" in result.stdout
    assert "TopSecretValue" not in result.stdout + result.stderr


def test_unknown_target_is_a_usage_error():
    result = _run("run", "--target", "nope")
    assert result.returncode == 2
    assert "target 'nope' is not in profiles.yml (known: local" in result.stdout.strip().splitlines()[-1]


def test_bad_arguments_exit_2():
    assert _run("run", "--no-such-flag").returncode == 2


def test_a_declared_table_without_its_model_files_is_a_usage_error_naming_them(tmp_path):
    from tests.conftest import copy_project

    project = copy_project(tmp_path / "project", {})
    (project / "models/marts/customers/customers_history.sql").unlink()
    (tmp_path / "landing").mkdir()
    result = _run("run", "--project-dir", str(project), "--landing", str(tmp_path / "landing"))
    assert result.returncode == 2
    assert ("FAILED: tracked table 'customers' has no model file customers_history.sql"
            in result.stdout.strip().splitlines()[-1]), result.stdout


def test_a_run_is_skipped_only_when_landing_warehouse_project_and_target_are_as_the_last_run_left_them(tmp_path):
    """The record that lets a run with nothing new exit before Spark (runner/run/unchanged.py): any
    new or changed landing file, any Delta commit in the warehouse, any edit of the project and
    another target (schema) make the next run a real one. The runner's use of it is exercised by
    the fault test's last run; here every invalidation, without Spark."""
    import os
    import shutil

    from runner.run.unchanged import LastRun
    from runner.spark.profile import Target

    project = tmp_path / "project"
    for name in ("dbt_project.yml", "profiles.yml", "models/staging/x.sql", "macros/m.sql"):
        (project / name).parent.mkdir(parents=True, exist_ok=True)
        (project / name).write_text(name)
    landing = tmp_path / "landing"
    (landing / "change_tables/dbo_t").mkdir(parents=True)
    (landing / "change_tables/dbo_t/b1.csv").write_text("a\n1\n")
    log = tmp_path / "state/warehouse/cdc.db/t_current/_delta_log"
    log.mkdir(parents=True)
    (log / "00000000000000000000.json").write_text("{}")
    target = Target("local", "session", "cdc", {"spark.sql.warehouse.dir": str(tmp_path / "state/warehouse")})
    record = tmp_path / "state/last_run.json"

    def last_run(t=target) -> LastRun:
        return LastRun(record, project, landing, t)

    assert last_run().unchanged_since() is None  # nothing recorded yet
    last_run().remember()
    assert last_run().unchanged_since()["finished_at"]
    # the fingerprint of the run's own first listing (serve's poll, run's first listing) is the same
    from runner.sources import landing as landing_files

    assert LastRun(record, project, landing, target, landing_files.listing(landing)).unchanged_since()

    def changed(change, undo) -> bool:
        change()
        skipped = last_run().unchanged_since() is not None
        undo()
        assert last_run().unchanged_since() is not None, "undoing the change restores the fingerprint"
        return not skipped

    new_file = landing / "change_tables/dbo_t/b2.csv"
    assert changed(lambda: new_file.write_text("a\n2\n"), new_file.unlink)
    old = landing / "change_tables/dbo_t/b1.csv"
    mtime = old.stat().st_mtime_ns
    assert changed(lambda: os.utime(old, ns=(mtime, mtime + 10**9)), lambda: os.utime(old, ns=(mtime, mtime)))
    commit = log / "00000000000000000001.json"
    assert changed(lambda: commit.write_text("{}"), commit.unlink)
    dropped = tmp_path / "dropped"
    assert changed(lambda: shutil.move(log.parent, dropped), lambda: shutil.move(dropped, log.parent))
    model = project / "models/staging/x.sql"
    assert changed(lambda: model.write_text("edited"), lambda: model.write_text("models/staging/x.sql"))
    other = Target("local", "session", "cdc_other", target.spark_conf)
    assert last_run(other).unchanged_since() is None
    last_run().forget()
    assert last_run().unchanged_since() is None


def test_kafka_sources_are_checked_before_spark(tmp_path):
    """A bad source, an unset secret variable or a server target stops the runner (exit 2) before
    Spark, and a project fed by Kafka alone needs no landing folder to get that far."""
    import yaml

    from tests.conftest import copy_project

    project = copy_project(tmp_path / "project", {}, drop=("customers", "order_lines"))
    config_path = project / "dbt_project.yml"
    config = yaml.safe_load(config_path.read_text())

    def run_with(source: dict, *args: str, env: dict | None = None) -> str:
        config["vars"]["cdc_kafka_sources"] = {"hub": source}
        config_path.write_text(yaml.safe_dump(config, sort_keys=False))
        result = subprocess.run([sys.executable, "-m", "runner", "run", "--project-dir", str(project), "--landing",
                                 str(tmp_path / "no_landing"), *args], cwd=PROJECT_DIR, capture_output=True, text=True,
                                timeout=120, check=False, env={**os.environ, **(env or {})})
        assert result.returncode == 2, result.stdout[-2000:]
        assert "starting Spark" not in result.stdout
        return result.stdout.strip().splitlines()[-1]

    base = {"channel": "ces", "bootstrap_servers": "127.0.0.1:1", "topics": ["employees_hub"]}
    assert "option sasl.jaas.config holds a secret: move it to secret_options" in run_with(
        {**base, "options": {"sasl.jaas.config": "x"}})
    unset = "SQLSERVER_CDC_TEST_UNSET_JAAS"
    assert f"environment variable {unset} (secret option sasl.jaas.config) is not set" in run_with(
        {**base, "secret_options": {"sasl.jaas.config": unset}})
    for target, what in (("cluster", "uses method thrift"), ("connect", "is Spark Connect")):
        assert (f"target {target} {what}: Kafka sources are read (their offsets through Kafka's client) in the runner's "
                "own SparkSession, so they need a session target that is not Spark Connect") in run_with(
            {**base, "secret_options": {"sasl.jaas.config": "TEST_JAAS"}}, "--target", target,
            env={"TEST_JAAS": "not-a-secret-value"})


def test_a_declaration_dbt_refuses_stops_the_run_before_spark_with_dbts_whole_message(tmp_path):
    """A column declared with a name generated SQL cannot carry: the run parses the project before
    Spark starts and lands nothing, and prints dbt's explanation and remedy, not only where it failed."""
    import yaml

    from tests.conftest import copy_project

    project = copy_project(tmp_path / "project", {}, drop=("customers", "order_lines", "products"))
    config_path = project / "dbt_project.yml"
    config = yaml.safe_load(config_path.read_text())
    config["vars"]["cdc_tracked_tables"]["employees"]["columns"][1]["name"] = "[desc]"
    config_path.write_text(yaml.safe_dump(config, sort_keys=False))
    (tmp_path / "landing").mkdir()
    result = subprocess.run([sys.executable, "-m", "runner", "run", "--project-dir", str(project), "--landing",
                             str(tmp_path / "landing")], cwd=PROJECT_DIR, capture_output=True, text=True, timeout=180,
                            check=False, env={**os.environ, "SQLSERVER_CDC_STATE_DIR": str(tmp_path / "state")})
    assert result.returncode == 2, result.stdout[-2000:]
    assert "starting Spark" not in result.stdout
    last = result.stdout.strip().splitlines()[-1]
    assert "FAILED: the project does not parse (dbt parse): Compilation Error in model employees_" in last, last
    assert ("tracked table 'employees': column name '[desc]' is not a plain identifier; name it with letters, digits "
            "and underscores and give the SQL Server name as its source_name") in last, last
    assert "> in macro" not in last


def test_finish_runs_counts_read_each_table_once_with_the_bounds_of_the_databases_that_count():
    """count_groups (what finish_run's one counting query reads): a table's databases in one group
    (a tenant table's rows matched on their database, a distinct table's on ''), a database that
    neither staged nor applied left out, changes counted only where the marts reached an LSN, and
    the staging read bounded below by the lowest lower bound of those: an LSN for change tables,
    a batch for an event channel."""
    from runner.run.cli import COUNTED_ONLY, count_groups

    def row(name, db, staged, applied, lower, reached, channel="change_tables", tenant=True):
        return {"name": name, "channel": channel, "staging": f"stg_{name}", "tenant": tenant, "database_id": db,
                "source_database": db.title() if tenant else None, "staged": staged, "applied": applied,
                "lower_lsn": lower if channel == "change_tables" else "", "lower_batch": "" if channel == "change_tables" else lower,
                "lsn_reached": reached, "batch_reached": "b9" if reached else ""}

    groups = count_groups([
        row("orders", "db1", True, True, "0x0B", "0x0C"),
        row("orders", "db2", True, False, "0x01", ""),  # staged, its marts not built: no change counts
        row("orders", "db3", False, False, "0x00", ""),  # nothing this run: not read
        row("orders", "db4", False, True, "0x05", "0x06"),
        row("events", "", False, True, "b3", "0x22", channel="ces", tenant=False),
        row("idle", "", False, False, "", ""),
    ])
    assert [g["name"] for g in groups] == ["orders", "events"]
    orders, events = groups
    assert [(r["key"], r["db"], r["staged"], r["applied"], r["marts"]) for r in orders["rows"]] == [
        ("databases/db1/orders", "Db1", True, True, True), ("databases/db2/orders", "Db2", True, False, False),
        ("databases/db4/orders", "Db4", False, True, True)]
    assert (orders["read_batches"], orders["read_above"], orders["marts"], orders["tenant"]) == (True, "0x05", True, True)
    assert [(r["key"], r["db"]) for r in events["rows"]] == [("events", "")]
    assert (events["read_batches"], events["read_above"], events["marts"]) == (False, "b3", True)
    # staged only: the run's batches are read, no bound of applied changes, no mart
    [staged] = count_groups([row("orders", "db2", True, False, "0x01", "")])
    assert (staged["read_batches"], staged["read_above"], staged["marts"]) == (True, None, False)
    assert set(COUNTED_ONLY) <= set(row("x", "", False, False, "", ""))
