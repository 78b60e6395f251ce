"""The same project on a Spark cluster: a local standalone cluster (master, two workers and one
server application serving Thrift and Spark Connect, cdc_tooling/cluster.py) runs the demo through
`python -m runner run --target cluster`, then over Spark Connect with the runner listing the same
landing folder on HDFS (cdc_tooling/hdfs.py) through WebHDFS and fsspec (runner/sources/folders.py), then,
its server stopped, with the runner as the driver of a cluster application whose landing folder
and warehouse are on HDFS; every mart equals, row for row, the one the embedded session builds
from the same landing files. The cluster listens on 127.0.0.1 only and leaves no process behind."""

from __future__ import annotations

import csv
import io
import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from cdc_simulator import demo_data
from cdc_simulator.tables import tracked_tables
from cdc_tooling.cluster import PORTS, Cluster, down, listening, process_tree, up
from cdc_tooling.hdfs import Hdfs
from runner.run import report
from tests.conftest import PROJECT_DIR, Pipeline, free_ports

pytestmark = [pytest.mark.service, pytest.mark.processes]

LOOPBACK = ("127.0.0.1:", "[::ffff:127.0.0.1]:", "[::1]:")



def _marts(spark, schema: str, warehouse: str | None = None) -> dict[str, list[str]]:
    """Every mart of every tracked table as its rows, each row all columns as JSON, sorted (read
    by path from `warehouse` when given)."""
    marts = {}
    for table in tracked_tables(PROJECT_DIR):
        for mart in (f"{table.name}_current", f"{table.name}_history"):
            relation = f"delta.`{warehouse}/{schema}.db/{mart}`" if warehouse else f"{schema}.{mart}"
            marts[mart] = sorted(r[0] for r in spark.sql(f"select to_json(struct(*)) as r from {relation}").collect())
    return marts


def _add_bad_input(landing: Path) -> None:
    """Rows and lines the pipeline must quarantine (the casts behave as on the local session only
    with the same Spark settings, ANSI off among them)."""
    order_lines = next((landing / "change_tables" / "sales_order_lines").rglob("*.csv"))
    with order_lines.open(newline="") as f:
        good = next(csv.DictReader(f))
    with (order_lines.parent / "bad.csv").open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(good))
        writer.writeheader()
        writer.writerows([{**good, "__$start_lsn": "0xNOTANLSN"}, {**good, "__$operation": "9"},
                          {**good, "quantity": "many"}])
    # the demo's exports have manifests, so a file lands only when one lists it (an empty range:
    # the rows' own LSNs decide where they apply)
    last = json.loads(max(order_lines.parent.glob("*.manifest.json")).read_text())
    (order_lines.parent / "bad.manifest.json").write_text(json.dumps({
        "capture_instance": "sales_order_lines", "after_lsn": last["through_lsn"], "through_lsn": last["through_lsn"],
        "files": [{"path": "bad.csv", "rows": 3}]}))
    (landing / "ces" / "bad.jsonl").write_text('not json\n{"specversion": "1.0", "type": "other"}\n')


def _ces_stream(output: str) -> str:
    """The run's CES stream line, without its time prefix."""
    return next(line[line.index("CES stream:"):] for line in output.splitlines() if "CES stream:" in line)


def test_cluster_target_builds_the_marts_the_local_session_builds(spark, hdfs: Hdfs, tmp_path):
    landing = tmp_path / "landing"
    demo_data.generate(spark, PROJECT_DIR, landing, transactions=120, batches=2, seed=19)
    _add_bad_input(landing)
    # the same files on HDFS, for the Spark Connect run and the cluster application
    remote = f"{hdfs.uri}/{tmp_path.name}"
    jvm = spark._jvm
    fs = jvm.org.apache.hadoop.fs.Path(remote).getFileSystem(spark._jsc.hadoopConfiguration())
    assert fs.copyFromLocalFile(False, True, jvm.org.apache.hadoop.fs.Path(str(landing)),
                                jvm.org.apache.hadoop.fs.Path(f"{remote}/landing")) is None
    cluster = Cluster(tmp_path / "cluster", dict(zip(PORTS, free_ports(len(PORTS)))))
    started: set[int] = set()
    try:
        up(cluster)
        started = process_tree(list(cluster.running().values()))
        schema = "c_" + uuid.uuid4().hex[:8]
        env = {
            **os.environ,
            "SQLSERVER_CDC_THRIFT_PORT": str(cluster.thrift_port),
            "SQLSERVER_CDC_SCHEMA": schema,
            # dbt's artifacts away from the project's target/, which the local run below writes
            "DBT_TARGET_PATH": str(tmp_path / "dbt_target"),
            "DBT_LOG_PATH": str(tmp_path / "dbt_logs"),
        }
        log = tmp_path / "cluster_run.log"
        with log.open("w") as out:
            run = subprocess.Popen(
                [sys.executable, "-m", "runner", "run", "--target", "cluster", "--landing", str(landing)],
                cwd=PROJECT_DIR, env=env, stdout=out, stderr=subprocess.STDOUT)
            try:
                # the same landing files through the embedded session, meanwhile
                local = Pipeline(spark, "l_" + uuid.uuid4().hex[:8], landing)
                progress = io.StringIO()
                local_summary = local.run(progress=report.Progress(stream=progress))
                local_stream = _ces_stream(progress.getvalue())
                run.wait(timeout=600)
            finally:
                if run.poll() is None:
                    run.kill()
                    run.wait()
        output = log.read_text()
        assert run.returncode == 0, output[-3000:]
        assert "target cluster: sending SQL to Spark" in output and "starting Spark" not in output
        # the same summary: rows landed and quarantined (the bad input), changes applied, LSN
        # reached, mart sizes; and the same CES stream counts
        table = io.StringIO()
        report.print_table(report.summary_table(local_summary), stream=table)
        assert table.getvalue().strip() in output
        assert {r["tracked_table"]: r["quarantined"] for r in local_summary}["order_lines"] == 3
        assert "2 lines quarantined" in local_stream and _ces_stream(output) == local_stream

        # executors included, every listening socket of the cluster is on the loopback interface,
        # the server's Thrift and Spark Connect ports among them
        tree = process_tree(list(cluster.running().values()))
        started |= tree
        addresses = " ".join(listening(tree))
        assert f":{cluster.thrift_port} " in addresses + " " and f":{cluster.connect_port} " in addresses + " "
        assert [a for a in addresses.split() if not a.startswith(LOOPBACK)] == []

        # the marts the server wrote, read by path from its warehouse
        warehouse = str(cluster.state_dir / "warehouse")
        on_session = _marts(spark, local.schema)
        on_cluster = _marts(spark, schema, warehouse=warehouse)
        for mart, rows in on_session.items():
            assert rows, f"{mart} is empty: the comparison would prove nothing"
            assert on_cluster[mart] == rows, f"{mart} differs between the cluster and the local session"

        # over Spark Connect to the same server application: the runner is its client and lists
        # the HDFS landing folder through WebHDFS (fsspec) while the server reads it
        connected = "k_" + uuid.uuid4().hex[:8]
        output = _run_over_spark_connect(tmp_path, cluster, f"{hdfs.webhdfs_uri}/{tmp_path.name}/landing", connected)
        assert f"landing new files from {hdfs.webhdfs_uri}/{tmp_path.name}/landing" in output
        assert table.getvalue().strip() in output and _ces_stream(output) == local_stream
        over_connect = _marts(spark, connected, warehouse=warehouse)
        for mart, rows in on_session.items():
            assert over_connect[mart] == rows, f"{mart} differs between Spark Connect and the local session"

        # the runner as the driver of an application on the cluster (the server, which holds
        # every core, stopped), its landing folder and warehouse on HDFS: only its metastore is local
        down(cluster, roles=("server",))
        output = _run_as_cluster_application(tmp_path, cluster, remote, schema)
        assert table.getvalue().strip() in output and _ces_stream(output) == local_stream
        as_application = _marts(spark, schema, warehouse=f"{remote}/warehouse")
        for mart, rows in on_session.items():
            assert as_application[mart] == rows, f"{mart} differs between the cluster application and the local session"
        for n in (1, 2):  # the server's executors and the runner's ran on each worker
            assert len(list((cluster.state_dir / f"work/worker{n}").glob("app-*"))) == 2
        assert not (tmp_path / "app_state" / "warehouse").exists()
    finally:
        down(cluster)
    assert cluster.pids() == {}, "pid files left behind"
    assert [pid for pid in sorted(started) if _alive(pid)] == [], "cluster processes still running"


def _run_as_cluster_application(tmp_path: Path, cluster: Cluster, remote: str, schema: str) -> str:
    """`python -m runner run` on the local target with the cluster's master, landing from
    `remote`/landing and writing to `remote`/warehouse (HDFS); returns its output."""
    uri = f"{remote}/landing"
    env = {
        **os.environ,
        "SQLSERVER_CDC_MASTER": cluster.master_url,
        "SQLSERVER_CDC_WAREHOUSE": f"{remote}/warehouse",
        "SQLSERVER_CDC_STATE_DIR": str(tmp_path / "app_state"),
        "SQLSERVER_CDC_DRIVER_MEMORY": "2g",
        "SQLSERVER_CDC_EXECUTOR_MEMORY": "768m",
        "SQLSERVER_CDC_SCHEMA": schema,
        "DBT_TARGET_PATH": str(tmp_path / "dbt_target_app"),
        "DBT_LOG_PATH": str(tmp_path / "dbt_logs_app"),
    }
    done = subprocess.run([sys.executable, "-m", "runner", "run", "--landing", uri], check=False, cwd=PROJECT_DIR, env=env,
                          capture_output=True, text=True, timeout=900)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-3000:]
    assert f"starting Spark (target local, master {cluster.master_url})" in output, output[-3000:]
    return output


def _run_over_spark_connect(tmp_path: Path, cluster: Cluster, landing: str, schema: str) -> str:
    """`python -m runner run --target connect` against the cluster's Spark Connect server."""
    env = {**os.environ, "SQLSERVER_CDC_REMOTE": cluster.connect_url, "SQLSERVER_CDC_SCHEMA": schema,
           "DBT_TARGET_PATH": str(tmp_path / "dbt_target_connect"), "DBT_LOG_PATH": str(tmp_path / "dbt_logs_connect")}
    done = subprocess.run([sys.executable, "-m", "runner", "run", "--target", "connect", "--landing", landing],
                          check=False, cwd=PROJECT_DIR, env=env, capture_output=True, text=True, timeout=900)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-3000:]
    assert f"starting Spark (target connect, Spark Connect {cluster.connect_url})" in output, output[-3000:]
    assert "CANNOT_MODIFY_STATIC_CONFIG" not in output, "dbt-spark's Hive-support warning reached the output"
    return output


def _alive(pid: int) -> bool:
    """Running (a zombie waiting for its parent to reap it has an empty command line)."""
    try:
        return bool(Path(f"/proc/{pid}/cmdline").read_bytes())
    except OSError:
        return False
