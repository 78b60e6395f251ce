"""Scenario data and helpers the tests share (test modules never import each other): the
change-table demo tables and how a batch of them lands, runner processes on a warehouse of their
own, the Debezium `items` table, and the `members` table of the capture-instance scenario."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from dataclasses import replace
from pathlib import Path

from cdc_simulator import landing_writer
from cdc_simulator.tables import Column, TableSpec, tracked_tables
from tests.conftest import PROJECT_DIR, TEST_CONF, Pipeline, copy_project

# the change-table demo tables (the CES and Debezium demo tables have tests of their own)
CHANGE_TABLES = [t for t in tracked_tables(PROJECT_DIR) if t.channel == "change_tables"]
NAMES = {t.name for t in CHANGE_TABLES}
FORMATS = {"customers": "parquet", "order_lines": "csv"}


def land_changes(pipeline, sim, txs, batch, first=False, tables=None):
    """Lands a batch of the change-table demo tables' exports (the first with captured columns)."""
    tables = tables or CHANGE_TABLES
    if first:
        landing_writer.write_captured_columns(pipeline.landing, tables)
    landing_writer.write_batch(pipeline.landing, batch, tables, txs, FORMATS,
                               min_lsn={t.capture_instance: txs[0].begin_lsn for t in tables} if first else None)


TIMEOUT = 600


class Warehouse:
    """A runner's warehouse of its own (state folder, schema cdc), run by `python -m runner run`
    processes and read by path (the embedded metastore admits one JVM)."""

    def __init__(self, spark, state: Path, project: Path, landing: Path, tables=()):
        self.spark, self.state, self.project, self.landing = spark, state, project, landing
        self.tables = list(tables)
        self.schema = "cdc"

    def land(self, transactions, batch: str, first: bool = False) -> None:
        if first:
            landing_writer.write_captured_columns(self.landing, self.tables)
        landing_writer.write_batch(self.landing, batch, self.tables, transactions, FORMATS,
                                   min_lsn={t.capture_instance: transactions[0].begin_lsn for t in self.tables} if first else None)

    def path(self, table: str) -> Path:
        schema = self.schema + "_raw" if table == "landed_rows" else self.schema
        return self.state / "warehouse" / f"{schema}.db" / table

    def rows(self, table: str) -> list[dict]:
        return [r.asDict(recursive=True) for r in self.spark.sql(f"select * from delta.`{self.path(table)}`").collect()]

    def mart_state(self, spec, mart: str) -> dict:
        """A mart (`current` or `history`) of a table by key (history: and valid_from_lsn), in
        the form expected_state gives."""
        key = list(spec.key)
        if mart == "current":
            return {tuple(r[k] for k in key): (r["commit_lsn"], *[r[c.name] for c in spec.columns])
                    for r in self.rows(f"{spec.name}_current")}
        return {(*[r[k] for k in key], r["valid_from_lsn"]): (r["valid_to_lsn"], r["is_current"], *[r[c.name] for c in spec.columns])
                for r in self.rows(f"{spec.name}_history")}

    def commits(self, table: str) -> int:
        log = self.path(table) / "_delta_log"
        return len(list(log.glob("*.json"))) if log.is_dir() else 0

    def data_files(self, table: str) -> int:
        root = self.path(table)
        return sum(1 for p in root.rglob("*.parquet") if "_delta_log" not in p.parts) if root.is_dir() else 0

    def start(self, *args: str, command: str = "run") -> subprocess.Popen:
        env = {**os.environ, "SQLSERVER_CDC_STATE_DIR": str(self.state), "SQLSERVER_CDC_SCHEMA": self.schema,
               "SQLSERVER_CDC_DRIVER_MEMORY": "2g",
               # the tests' session's settings (tests/conftest.py TEST_CONF)
               "PYSPARK_SUBMIT_ARGS": " ".join(f"--conf {k}={v}" for k, v in TEST_CONF.items()) + " pyspark-shell"}
        return subprocess.Popen(
            [sys.executable, "-m", "runner", command, "--project-dir", str(self.project), "--landing", str(self.landing),
             *args], cwd=PROJECT_DIR, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            start_new_session=True)

    def run(self, *args: str) -> str:
        proc = self.start(*args)
        out, _ = proc.communicate(timeout=TIMEOUT)
        assert proc.returncode == 0, out[-3000:]
        assert "HiveAlterHandler" not in out, "the metastore refused a replaced table's schema (profiles.yml)"
        return out

    def kill_when(self, condition, what: str, python_only: bool = False, command: str = "run") -> str:
        """Starts a run (or another runner command) and SIGKILLs its process tree (Python and the
        JVM; python_only: the Python process alone, its JVM left running, frozen: no output then) as
        soon as condition() holds; returns the run's output."""
        proc = self.start(command=command)
        deadline = time.monotonic() + TIMEOUT
        while not condition():
            assert proc.poll() is None, f"the run ended before {what}: {proc.stdout.read()[-3000:]}"
            assert time.monotonic() < deadline, f"no {what} within {TIMEOUT} s"
            time.sleep(0.02)
        if python_only:  # its JVM frozen first, as one stuck in its shutdown (it ends at once when its pipe closes)
            jvm = json.loads((self.state / "runner.run.lock").read_text())["jvm_pid"]
            os.kill(jvm, signal.SIGSTOP)
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(timeout=60)  # its output pipe stays open while the JVM holds it
            proc.stdout.close()
            return ""
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate(timeout=60)
        return out


def expected_state(spec, sim, upper, mart: str) -> dict:
    """What Warehouse.mart_state must give after the simulator's transactions up to `upper`."""
    from tests.expected import current_state, history  # it imports this module

    if mart == "current":
        return {k: (v["commit_lsn"], *[v[c.name] for c in spec.columns])
                for k, v in current_state(spec, sim.transactions, upper).items()}
    return {k: (v["valid_to_lsn"], v["is_current"], *[v[c.name] for c in spec.columns])
            for k, v in history(spec, sim.transactions, upper).items()}


# Debezium's `items`, and its change-table twin
ITEM_COLUMNS = (Column("item_id", "int", 1), Column("item_name", "nvarchar(60)", 2), Column("price", "decimal(12,2)", 3),
                Column("qty", "smallint", 4), Column("launched", "date", 5), Column("updated", "datetime2(7)", 6),
                Column("checked", "datetime", 7), Column("flag", "bit", 8), Column("blob", "varbinary(16)", 9))
ITEMS = TableSpec("items", "dbo_items", ("item_id",), ITEM_COLUMNS, "debezium", ("ShopDb", "dbo", "items"))
# the same table captured into a change table, for the landing writer
ITEMS_CT = replace(ITEMS, channel="change_tables")
DECLARED_COLUMNS = [{"name": c.name, "type": c.type, "ordinal": c.ordinal} for c in ITEM_COLUMNS]


def debezium_pipeline(spark, tmp_path, tables: dict, replace=True) -> Pipeline:
    project = copy_project(tmp_path / "project", tables, replace=replace)
    (tmp_path / "landing").mkdir()
    return Pipeline(spark, "t_" + uuid.uuid4().hex[:8], tmp_path / "landing", project_dir=project)


# the capture-instance scenario's `members`
TYPES = {"member_id": "int", "full_name": "nvarchar(100)", "email": "varchar(200)", "credit_limit": "decimal(12,2)",
         "created_at": "datetime2(3)", "tier": "varchar(10)"}
KEY = ("member_id",)
# the first instance captures the table as it was; the second, created after `tier` was added,
# leaves `email` out (it is dropped from the source once the first instance is gone)
OLD = ["member_id", "full_name", "email", "credit_limit", "created_at"]
NEW = ["member_id", "full_name", "credit_limit", "tier", "created_at"]
TABLE = list(TYPES)  # the marts' columns: every column either instance captured


def members_declaration(instances: list[dict] | None) -> dict:
    """members with one capture instance (None) or several."""
    if instances is None:
        members = {"channel": "change_tables", "capture_instance": "dbo_members", "key": list(KEY),
                   "columns": [{"name": n, "type": TYPES[n], "ordinal": i} for i, n in enumerate(OLD, 1)]}
    else:
        members = {"channel": "change_tables", "capture_instances": instances, "key": list(KEY),
                   "columns": [{"name": n, "type": TYPES[n]} for n in TABLE]}
    return members
