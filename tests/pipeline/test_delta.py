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
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from runner.errors import InfrastructureError
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
    assert driver == sorted(Path(j).name for j in listed if Path(j).name.startswith(("io.delta_", jars.LOG_STORE_JAR))), driver
    assert any(name.startswith(jars.LOG_STORE_JAR) for name in driver), driver


def _statuses(found) -> list[tuple]:
    """A listing's entries as (path, length, folder, time), in its order."""
    entries = []
    while found.hasNext():
        status = found.next()
        entries.append((status.getPath().toString(), status.getLen(), status.isDirectory(), status.getModificationTime()))
    return entries


# the entries of a local _delta_log, per version (Delta's commit, its checksum, checkpoints of one
# part or several, a compacted range, a commit being written) and Hadoop's hidden checksum of each
ENTRY_KINDS = ("{v:020d}.json", "{v:020d}.crc", "{v:020d}.checkpoint.parquet",
               "{v:020d}.checkpoint.0000000001.0000000002.parquet", "{v:020d}.{w:020d}.compacted.json",
               ".{v:020d}.json.6f1e.tmp", "{v:020d}.checkpoint.6f1e.parquet")


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(versions=st.dictionaries(st.integers(0, 40), st.sets(st.sampled_from(ENTRY_KINDS), min_size=1), max_size=25),
       hidden=st.booleans(), extra=st.sets(st.sampled_from(["_last_checkpoint", "_staged_commits/", "_sidecars/",
                                                            "a:b.json", "zz"])),
       start=st.one_of(st.none(), st.integers(0, 45)), exact=st.booleans(), data=st.data())
def test_the_log_store_lists_exactly_what_deltas_own_lists(spark, versions, hidden, extra, start, exact, data):
    """The profile's log store (runner/spark/java/) answers listFrom as Delta's own LocalLogStore
    does, entry for entry (path, length, folder or not, time) and in its order, on folders of every
    kind of _delta_log entry, with Hadoop's hidden checksums or without, from a version's prefix
    (as Delta asks) or from a file's whole name, or from "." (every hidden name but Hadoop's
    checksums); a missing folder is refused by both alike."""
    import tempfile

    jvm, conf = spark._jvm, spark._jsc.hadoopConfiguration()
    ours, deltas = jvm.sqlserver_cdc.delta.NamesFirstLocalLogStore(conf), jvm.io.delta.storage.LocalLogStore(conf)
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "_delta_log"
        log.mkdir()
        names = [kind.format(v=v, w=v + 3) for v, kinds in versions.items() for kind in kinds] + sorted(extra)
        for name in names:
            if name.endswith("/"):
                (log / name).mkdir()
                (log / name / "00000000000000000001.uuid.json").write_text("{}")
                continue
            (log / name).write_bytes(b"x" * data.draw(st.integers(0, 300)))
            if hidden:
                (log / f".{name}.crc").write_bytes(b"crc")
        # from a version's prefix or whole name; None: from "." on, which takes in the hidden names
        prefix = "." if start is None else f"{start:020d}" + (".json" if exact else ".")
        path = jvm.org.apache.hadoop.fs.Path(log.as_uri() + "/" + prefix)
        listed = _statuses(ours.listFrom(path, conf))
        assert listed == _statuses(deltas.listFrom(path, conf))
        assert [Path(e[0]).name for e in listed] == sorted(n.rstrip("/") for n in names if n.rstrip("/") >= prefix)
    missing = jvm.org.apache.hadoop.fs.Path(log.as_uri() + "/00000000000000000000.")
    for store in (ours, deltas):
        with pytest.raises(Exception, match="java.io.FileNotFoundException"):
            store.listFrom(missing, conf)


def test_delta_uses_the_log_store_for_local_paths_only(spark, tmp_path):
    """Delta takes the profile's store for the file scheme, so every statement on a local
    warehouse lists through it, and keeps its own for every other scheme (HDFS, S3, ...)."""
    jvm = spark._jvm
    spark.range(3).write.format("delta").save(str(tmp_path / "t"))
    store = jvm.org.apache.spark.sql.delta.DeltaLog.forTable(spark._jsparkSession, str(tmp_path / "t")).store()

    def chosen(uri: str) -> str:
        return store.getDelegate(jvm.org.apache.hadoop.fs.Path(uri)).logStoreImpl().getClass().getName()

    assert spark.conf.get("spark.delta.logStore.file.impl") == jars.LOG_STORE_CLASS
    assert chosen((tmp_path / "t" / "_delta_log").as_uri()) == jars.LOG_STORE_CLASS
    assert chosen("hdfs://namenode:8020/warehouse/t/_delta_log") == "io.delta.storage.HDFSLogStore"
    assert spark.read.format("delta").load(str(tmp_path / "t")).count() == 3


def test_the_log_store_is_built_once_from_its_source_and_a_broken_source_is_refused(tmp_path, monkeypatch):
    """Set-up compiles the log store with the Eclipse compiler (a JRE is enough) into the jar
    folder: the same bytes each build, not again while its source is unchanged, older builds
    removed; a source that does not compile stops set-up naming the file and the compiler's error."""
    import zipfile

    folder = tmp_path / "jars"
    folder.mkdir()
    storage = next(jars.jars_dir().glob("io.delta_delta-storage-*.jar"))
    (folder / storage.name).write_bytes(storage.read_bytes())
    (folder / f"{jars.LOG_STORE_JAR}0123456789ab.jar").write_bytes(b"an older build")
    built = jars.build_log_store(folder)
    assert sorted(p.name for p in folder.glob("*.jar")) == sorted([storage.name, built.name])
    assert zipfile.ZipFile(built).namelist() == ["META-INF/MANIFEST.MF", "sqlserver_cdc/delta/NamesFirstLocalLogStore.class"]
    assert built.read_bytes() == next(jars.jars_dir().glob(f"{jars.LOG_STORE_JAR}*.jar")).read_bytes()
    stamp = built.stat().st_mtime_ns
    assert jars.build_log_store(folder) == built and built.stat().st_mtime_ns == stamp
    broken = tmp_path / "java" / jars.LOG_STORE_SOURCE.name
    broken.parent.mkdir()
    broken.write_text(jars.LOG_STORE_SOURCE.read_text().replace("extends LocalLogStore", "extends NoSuchLogStore"))
    monkeypatch.setattr(jars, "LOG_STORE_SOURCE", broken)
    with pytest.raises(InfrastructureError, match=rf"(?s)could not compile {re.escape(str(broken))}: .*ERROR in .*NoSuchLogStore cannot be resolved"):
        jars.build_log_store(folder)
    assert sorted(p.name for p in folder.glob("*.jar")) == sorted([storage.name, built.name])


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
