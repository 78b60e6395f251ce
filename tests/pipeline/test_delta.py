"""Storage set-up: Delta's jars come from the project's jar folder only (no network after
set-up), and the runner lock's rules (holder named, --wait, a killed holder's lock taken over)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from runner.run.lock import RunnerLock, WarehouseBusy, describe_previous
from runner.spark import jars
from runner.spark.profile import load_target
from tests.conftest import PROJECT_DIR


def test_sessions_load_delta_from_the_local_jar_folder_only(spark):
    conf = spark.sparkContext.getConf()
    listed = conf.get("spark.jars").split(",")
    folder = jars.jars_dir()
    assert listed and all(Path(j).parent == folder and Path(j).is_file() for j in listed), listed
    assert any(Path(j).name.startswith("io.delta_delta-spark_") for j in listed)
    assert conf.get("spark.jars.packages", None) is None and conf.get("spark.jars.repositories", None) is None
    assert (folder / jars.MARKER).read_text().strip() == jars.spark_packages()
    # the coordinates are Delta's own for this pyspark line
    import pyspark

    major_minor = ".".join(pyspark.__version__.split(".")[:2])
    assert jars.delta_packages().startswith(f"io.delta:delta-spark_{major_minor}_2.13:")
    assert spark.conf.get("spark.sql.extensions") == "io.delta.sql.DeltaSparkSessionExtension"
    # plain dbt gets Delta's local jars from the profile: the driver folder, on the classpath
    profile = load_target(PROJECT_DIR, "local").spark_conf
    assert "spark.jars" not in profile and profile["spark.driver.extraClassPath"].endswith(".jars/driver/*")
    # the runner's own session names them in spark.jars only (both made runs about a tenth slower)
    assert spark.sparkContext.getConf().get("spark.driver.extraClassPath", None) is None
    driver = sorted(j.name for j in jars.driver_dir().glob("*"))
    assert driver == sorted(Path(j).name for j in listed if Path(j).name.startswith("io.delta_")), driver


def test_set_up_fetches_the_tests_jars_only_when_asked(monkeypatch, capsys):
    """`make demo` fetches the sessions' jars; the broker's and HDFS's (tests only) come with
    `--tests` (make test, make test-fast); anything else is refused with the usage."""
    fetched = []
    for name in ("ensure", "ensure_broker", "ensure_hdfs"):
        monkeypatch.setattr(jars, name, lambda name=name: fetched.append(name))
    assert jars.main([]) == 0 and fetched == ["ensure"]
    fetched.clear()
    assert jars.main(["--tests"]) == 0 and fetched == ["ensure", "ensure_broker", "ensure_hdfs"]
    fetched.clear()
    assert jars.main(["--test"]) == 2 and fetched == []
    assert "usage: python -m runner.spark.jars [--tests]" in capsys.readouterr().err


@pytest.mark.processes
def test_plain_dbt_on_a_new_warehouse_prints_no_error_and_writes_delta(tmp_path):
    """A plain dbt command (README's own use) on a fresh state folder: the profile's session
    loads Delta from the jar folder with no ERROR line or Java stack trace on the console (a glob in
    spark.jars printed both on every start), and Derby writes its log into the state folder it
    creates (a missing folder sent its boot report to the console). One cold JVM, about 30 s."""
    state = tmp_path / "state"
    env = {**{k: v for k, v in os.environ.items() if k != "PYSPARK_SUBMIT_ARGS"}, "SQLSERVER_CDC_STATE_DIR": str(state)}
    done = subprocess.run([str(Path(sys.executable).parent / "dbt"), "seed", "--profiles-dir", ".",
                           "--target-path", str(tmp_path / "target"), "--log-path", str(tmp_path / "logs")],
                          cwd=PROJECT_DIR, env=env, capture_output=True, text=True, check=False, timeout=600)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-3000:]
    problems = [line for line in output.splitlines()
                if "ERROR" in line.replace("ERROR=0", "") or "Exception" in line or line.startswith(("\tat ", "java."))]
    assert not problems, "\n".join(problems[:20])
    assert (state / "derby.log").is_file() and (state / "metastore_db").is_dir()
    assert (state / "warehouse" / "cdc.db" / "cdc_operations" / "_delta_log").is_dir()


def test_the_lock_names_its_holder_waits_and_takes_over_a_dead_holders_lock(tmp_path):
    path = tmp_path / "runner.run.lock"
    holder = RunnerLock(path, "local", "serve").acquire()
    try:
        with pytest.raises(WarehouseBusy, match=rf"another runner holds this warehouse: python -m runner serve, pid "
                                                rf"{os.getpid()} on host "
                                                r".*, started .*, target local \(lock .*runner.run.lock\); wait for it"):
            RunnerLock(path, "local").acquire()
        with pytest.raises(WarehouseBusy, match="holds this warehouse after waiting 0.3 s"):
            RunnerLock(path, "local").acquire(wait_seconds=0.3)
    finally:
        holder.release()
    with RunnerLock(path, "local").acquire() as clean:
        assert clean.previous is None  # released cleanly: nothing to take over
    # a process killed while holding it leaves its record but not the lock
    code = ("import os, sys; from pathlib import Path; from runner.run.lock import RunnerLock; "
            f"RunnerLock(Path({str(path)!r}), 'local').acquire(); os._exit(9)")
    assert subprocess.run([sys.executable, "-c", code], cwd=PROJECT_DIR, check=False).returncode == 9
    dead = json.loads(path.read_text())
    with RunnerLock(path, "local").acquire() as taken:
        assert taken.previous["pid"] == dead["pid"]
        assert re.match(rf"took over the lock of a runner that ended without releasing it "
                        rf"\(python -m runner \w+, pid {dead['pid']} on host ", describe_previous(taken))


def test_a_second_runner_process_exits_2_naming_the_holder(tmp_path):
    (tmp_path / "landing").mkdir()
    state = tmp_path / "state"
    with RunnerLock(state / "runner.run.lock", "local", "serve").acquire():
        result = subprocess.run(
            [sys.executable, "-m", "runner", "maintain", "--landing", str(tmp_path / "landing")], cwd=PROJECT_DIR,
            env={**os.environ, "SQLSERVER_CDC_STATE_DIR": str(state)}, capture_output=True, text=True,
            timeout=120, check=False)
    assert result.returncode == 2, result.stdout + result.stderr
    last = result.stdout.strip().splitlines()[-1]
    assert f"FAILED: another runner holds this warehouse: python -m runner serve, pid {os.getpid()} on host" in last
    assert "pass --wait SECONDS" in last
