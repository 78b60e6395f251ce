"""Safety of real runner processes on one warehouse: runs killed (SIGKILL of the process tree)
inside a landing append, inside a mart's MERGE and between the marts' commits and their
watermarks, then re-run, give the marts of uninterrupted runs with every landed record exactly
once; a reader during a run sees each mart before or after its commit, never in between; a
second runner exits 2 naming the holder, or waits with --wait (and, nothing having changed since
the holder's run, exits without starting Spark); a lock left by a killed run is taken over. The
last holder is a resident runner (`python -m runner serve`): it takes in batches as they land,
goes on after a run that refuses a file, serves metrics equal to the ledger's rows, and on
SIGTERM finishes its run and exits 0. A maintenance pass killed inside a compaction or a VACUUM
leaves every table readable and the next run exact, and a pass is refused beside the service.
A run that hangs (its JVM frozen) is abandoned at
`run --timeout` as a kill would, naming where it was, and the next run is exact; a frozen run of
the service makes /healthz answer 503 past `--run-limit`, and thawed it finishes.

The runners are `python -m runner run` (and `serve`) processes with their own state folder (the embedded
metastore admits one JVM); this test's session reads their Delta tables by path."""

from __future__ import annotations

import json
import os
import signal
import socket
import threading
import time
import urllib.error
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from cdc_simulator.simulate import Simulator
from runner.project.yaml_edit import edit_yaml
from runner.run.lock import process_start
from tests.conftest import EVENT_TABLES, copy_project
from tests.scenarios import CHANGE_TABLES, TIMEOUT, Warehouse, expected_state

# one table keeps each of the many runs short (a third of the demo's dbt nodes)
TABLES = [t for t in CHANGE_TABLES if t.name == "customers"]

def _check(wh: Warehouse, sim, upper, landed_records: int) -> None:
    for spec in TABLES:
        for mart in ("current", "history"):
            assert wh.mart_state(spec, mart) == expected_state(spec, sim, upper, mart), f"{spec.name}_{mart}"
    raw = [r for r in wh.rows("landed_rows") if r["landing_kind"] != "landed_files"]
    assert len(raw) == landed_records, "landed records lost or duplicated"
    files = {}
    for r in raw:
        files.setdefault(r["_source_file"], set()).add(r["_batch_id"])
    assert all(len(batches) == 1 for batches in files.values()), "a file landed in two batches"
    # each landed file has one record, from the batch its rows landed in (one commit)
    records = {}
    for r in wh.rows("landed_rows"):
        if r["landing_kind"] == "landed_files" and r["_source_file"] is not None:
            records.setdefault(r["_source_file"], []).append(r["_batch_id"])
    assert {f: sorted(batches) for f, batches in files.items()} == {f: records.get(f) for f in files}
    assert all(len(batches) == 1 for batches in records.values()), "a file recorded twice"


def _records(sim, transactions) -> int:
    """Raw records the landing writer produces for transactions: change rows plus one mapping row
    each (captured columns and change_tables exports are counted by the caller)."""
    return sum(len(rows) for tx in transactions for rows in tx.changes.values()) + len(transactions)


@pytest.mark.processes
def test_killed_runs_rerun_to_the_same_marts_readers_see_whole_commits_one_runner_at_a_time(spark, tmp_path):
    """The kill points are chained in one history (each re-run of a killed run is itself killed at
    the next point, with a new batch landed before it, so it also takes in more than the killed
    run had): five runner processes where a separate re-run per kill took eight. The kill inside a
    MERGE is the one whose JVM is left frozen: it never commits, as under SIGKILL, and the next
    runner must kill that JVM first."""
    landing = tmp_path / "landing"
    landing.mkdir()
    project = copy_project(tmp_path / "project", {}, drop=(*EVENT_TABLES, "order_lines"))
    # maintenance finds work after a few runs: compaction past 2 files, every removed file vacuumed
    edit_yaml(project / "dbt_project.yml", lambda doc: doc["vars"].update({"cdc_maintenance": {
        "compact_after_files": 2, "retention_hours": 0, "vacuum_every_hours": 0.0001}}) or True)
    wh = Warehouse(spark, tmp_path / "state", project, landing, TABLES)
    sim = Simulator(TABLES, seed=83)
    first = sim.run(40)
    wh.land(first, "b1", first=True)
    records = _records(sim, first) + sum(len(t.columns) for t in TABLES) + len(TABLES)
    wh.run()
    _check(wh, sim, first[-1].commit_lsn, records)
    uppers = [first[-1].commit_lsn]  # the bound of each landed batch: the states a mart may be in

    def land(transactions, batch: str) -> None:
        nonlocal records
        wh.land(transactions, batch)
        records += _records(sim, transactions)
        uppers.append(transactions[-1].commit_lsn)

    # 1. killed inside the landing append (its data files written, its commit not yet): nothing
    #    of the batch counts as landed, the next run lands it once
    land(sim.run(25), "b2")
    files, commits = wh.data_files("landed_rows"), wh.commits("landed_rows")
    out = wh.kill_when(lambda: wh.data_files("landed_rows") > files, "landing append")
    assert "dbt build" not in out
    inside = wh.commits("landed_rows") == commits

    # 2. its re-run, taking over the lock, killed inside a mart's MERGE (data files written, commit
    #    not yet): its Python process killed, its JVM left stuck (frozen: a JVM whose pipe closes
    #    normally ends within a second) until the next runner kills it, so the MERGE never commits
    land(sim.run(20) + [sim.transaction(statements=2, kinds=("delete",)) for _ in range(3)], "b3")
    files, committed = wh.data_files("customers_current"), wh.commits("customers_current")
    wh.kill_when(lambda: wh.data_files("customers_current") > files, "MERGE into customers_current", python_only=True)
    jvm = json.loads((tmp_path / "state" / "runner.run.lock").read_text())["jvm_pid"]
    assert process_start(jvm) is not None
    kills = [("MERGE into customers_current", wh.commits("customers_current") == committed)]

    # 3. the next runner stops that JVM before its own Spark starts, takes over the lock, and is
    #    itself killed after the last mart committed, before the watermarks were recorded
    land(sim.run(20) + [sim.transaction(statements=2, kinds=("delete",)) for _ in range(3)], "b4")
    committed = wh.commits("customers_history")
    try:
        out = wh.kill_when(lambda: wh.commits("customers_history") > committed, "commit of customers_history")
    finally:  # a frozen JVM must not outlive a failing test
        if process_start(jvm) is not None:
            os.kill(jvm, signal.SIGKILL)
    assert f"killed the JVM (pid {jvm}) of the runner that ended without releasing the lock" in out, out[-3000:]
    assert "took over the lock of a runner that ended without releasing it" in out, out[-3000:]
    assert process_start(jvm) is None
    kills.append(("commit of customers_history", wh.commits("customers_history") == committed))
    print(f"killed inside the landing append before its commit: {inside}; "
          + "; ".join(f"{what} killed before its commit: {before_commit}" for what, before_commit in kills))

    # 3b. a run that hangs (its JVM frozen as soon as Spark started) is abandoned at --timeout as a
    #     kill would: exit 2 naming where it was, its JVM killed, the lock released; the service's
    #     first run below applies what it had landed
    land(sim.run(10), "b4b")
    hung = wh.start("--timeout", "60")
    lock = tmp_path / "state" / "runner.run.lock"
    frozen = None
    while hung.poll() is None and frozen is None:
        text = lock.read_text()
        if f'"pid": {hung.pid},' in text and '"jvm_pid"' in text:
            frozen = json.loads(text)["jvm_pid"]
            os.kill(frozen, signal.SIGSTOP)
        time.sleep(0.02)
    out, _ = hung.communicate(timeout=TIMEOUT)
    assert hung.returncode == 2, out[-3000:]
    failed = next(line for line in out.splitlines() if "FAILED" in line)
    assert "FAILED: the run did not finish within --timeout 60 s; it was at " in failed, out[-3000:]
    assert "Abandoned as a kill would: nothing of it is half-applied" in failed
    assert frozen is not None, f"the run ended before its JVM was recorded: {out[-3000:]}"
    assert f"killed the run's JVM (pid {frozen})" in out and process_start(frozen) is None, out[-3000:]
    assert lock.read_text() == "", "the abandoned run did not release the lock"

    # 3c. a maintenance pass killed inside a compaction (OPTIMIZE's file written, its commit not
    #     yet), then one killed inside a VACUUM (files deleted, VACUUM END not committed): every
    #     table stays readable at a whole run's state (checked below), and the service's first run
    #     applies b5 exactly (step 4)
    mart = "customers_history"
    files, committed = wh.data_files(mart), wh.commits(mart)
    out = wh.kill_when(lambda: wh.data_files(mart) > files, "OPTIMIZE of customers_history", command="maintain")
    kills = [("OPTIMIZE of customers_history", wh.commits(mart) == committed)]
    files = wh.data_files(mart)
    out = wh.kill_when(lambda: wh.data_files(mart) < files, "VACUUM of customers_history", command="maintain")
    kills.append(("VACUUM of customers_history", not any(
        json.loads(line).get("commitInfo", {}).get("operation") == "VACUUM END"
        for f in sorted((wh.path(mart) / "_delta_log").glob("*.json"))[-2:] for line in f.read_text().splitlines())))
    print("; ".join(f"maintenance killed inside {what} before its end: {inside}" for what, inside in kills))

    # every mart is at the state of a whole run: one of the landed batches' bounds
    before = {}
    for spec in TABLES:
        for mart in ("current", "history"):
            state = wh.mart_state(spec, mart)
            assert any(state == expected_state(spec, sim, upper, mart) for upper in uppers), f"{spec.name}_{mart}"
            before[(spec.name, mart)] = state

    # 4. a resident runner (`serve`) holds the lock; its first run takes in b5 while a session
    #    reads the marts (each read sees the state before the run or after it); a second runner
    #    exits 2 naming it and a third waits its turn (until the service stops)
    land(sim.run(15), "b5")
    after = sim.transactions[-1].commit_lsn
    states = {key: (old, expected_state(next(t for t in TABLES if t.name == key[0]), sim, after, key[1]))
              for key, old in before.items()}
    seen: list[str] = []
    errors: list[str] = []
    done = threading.Event()

    def read_while_running():
        while not done.is_set():
            for (name, mart), (old, new) in states.items():
                got = wh.mart_state(next(t for t in TABLES if t.name == name), mart)
                if got == new:
                    seen.append("after")
                elif got == old:
                    seen.append("before")
                else:
                    errors.append(f"{name}_{mart}: a read saw neither the state before the run nor after it")
                    return
            time.sleep(0.5)  # leave the runner most of the two cores

    recorded_before = {r["run_id"] for r in wh.rows("cdc_runs")}
    port = _free_port()
    holder = wh.start("--poll", "0.3", "--every", "3600", "--metrics-port", str(port), "--max-failures", "2",
                      "--run-limit", "20", command="serve")
    reader = threading.Thread(target=read_while_running)
    reader.start()
    try:
        deadline = time.monotonic() + 120
        while not (lock.exists() and f'"pid": {holder.pid}' in lock.read_text()):
            assert holder.poll() is None and time.monotonic() < deadline, "the service never took the lock"
            time.sleep(0.05)
        refused = wh.start()
        out, _ = refused.communicate(timeout=120)
        assert refused.returncode == 2, out
        last = out.strip().splitlines()[-1]
        assert "FAILED: another runner holds this warehouse" in last and f"pid {holder.pid} on host" in last, last
        assert "python -m runner serve" in last, last
        # so is a maintenance pass, which never runs beside the service (the service maintains)
        maintaining = wh.start(command="maintain")
        out, _ = maintaining.communicate(timeout=120)
        assert maintaining.returncode == 2 and "python -m runner serve" in out.strip().splitlines()[-1], out
        waiting = wh.start("--wait", str(TIMEOUT))
        _scraped(holder, port, lambda m: m.get(("sqlserver_cdc_runs_total", "succeeded"), 0) >= 1)
    finally:
        done.set()
        reader.join()
    assert not errors, errors
    assert "before" in seen, "the reader never read during the run"
    _check(wh, sim, after, records)

    # 5. a file the service refuses fails its run, and it goes on (healthy until --max-failures
    #    runs fail in a row); its metrics equal the ledger's rows of its runs
    cut = landing / "change_tables" / TABLES[0].capture_instance / "zz_cut.csv"
    cut.write_text("id\n1")
    metrics = _scraped(holder, port, lambda m: m.get(("sqlserver_cdc_runs_total", "failed"), 0) >= 1)
    assert _get(port, "/healthz") == (200, "ok")
    ledger = sorted((r for r in wh.rows("cdc_runs") if r["run_id"] not in recorded_before), key=lambda r: r["run_id"])
    assert len(ledger) == 2 and any("zz_cut.csv" in reason for reason in ledger[-1]["refused"])
    for t in TABLES:
        rows = [row for r in ledger for row in r["tables"] if row["tracked_table"] == t.name]
        assert metrics[("sqlserver_cdc_table_changes_applied_total", t.name)] == sum(row["changes_applied"] for row in rows) > 0
        assert metrics[("sqlserver_cdc_table_rows_landed_total", t.name)] == sum(row["rows_landed"] for row in rows) > 0
        assert metrics.get(("sqlserver_cdc_table_lag_seconds", t.name)) == rows[-1]["lag_seconds"]

    # 5b. a run of the service that hangs (its JVM frozen) is reported: /healthz answers 503 once it
    #     has run longer than --run-limit, naming where it is, and /metrics shows its age; thawed, it
    #     finishes and the service is healthy again
    def arrive(transactions, batch: str) -> None:
        """Lands a batch beside the landing folder, then moves it in at once (the refused file
        removed with it): the service must not see it half-written."""
        staged = tmp_path / f"staged-{batch}"
        wh.landing = staged
        land(transactions, batch)
        wh.landing = landing
        cut.unlink(missing_ok=True)
        for f in sorted(staged.rglob("*")):
            if f.is_file():
                (landing / f.relative_to(staged)).parent.mkdir(parents=True, exist_ok=True)
                f.rename(landing / f.relative_to(staged))

    succeeded = _scraped(holder, port, lambda m: True)[("sqlserver_cdc_runs_total", "succeeded")]
    arrive(sim.run(5), "b5b")
    _scraped(holder, port, lambda m: m[("sqlserver_cdc_run_in_progress_seconds", None)] > 0)
    jvm = json.loads(lock.read_text())["jvm_pid"]
    os.kill(jvm, signal.SIGSTOP)
    try:
        deadline = time.monotonic() + TIMEOUT
        while (answer := _get(port, "/healthz"))[0] == 200:
            assert time.monotonic() < deadline, "a frozen run never made /healthz answer 503"
            time.sleep(0.5)
        frozen_for = _scraped(holder, port, lambda m: True)[("sqlserver_cdc_run_in_progress_seconds", None)]
    finally:
        os.kill(jvm, signal.SIGCONT)
    assert answer[0] == 503 and answer[1].startswith("the run in progress has run "), answer
    assert "over the limit of 20 s (--run-limit); it is at " in answer[1], answer
    assert frozen_for > 20
    _scraped(holder, port, lambda m: m[("sqlserver_cdc_runs_total", "succeeded")] > succeeded
             and m[("sqlserver_cdc_run_in_progress_seconds", None)] == 0)
    assert _get(port, "/healthz") == (200, "ok")
    _check(wh, sim, sim.transactions[-1].commit_lsn, records)

    # 6. a new batch landed, SIGTERM during the run that takes it in: the run finishes, the service
    #    exits 0, and the waiting runner finds nothing new
    files = wh.data_files("landed_rows")
    arrive(sim.run(10), "b6")
    after = sim.transactions[-1].commit_lsn
    deadline = time.monotonic() + TIMEOUT
    while wh.data_files("landed_rows") == files:
        assert holder.poll() is None and time.monotonic() < deadline, "the service never took in b6"
        time.sleep(0.05)
    os.kill(holder.pid, signal.SIGTERM)
    served, _ = holder.communicate(timeout=TIMEOUT)
    assert holder.returncode == 0, served[-3000:]
    assert "SIGTERM: stopping after the current run" in served and served.strip().endswith("stopped"), served[-3000:]
    out, _ = waiting.communicate(timeout=TIMEOUT)
    assert waiting.returncode == 0, out[-3000:]
    assert "waiting up to" in out and "nothing new landed" in out
    # the service's last run succeeded and nothing changed since: the waiting run exits before Spark
    assert "nothing to build (Spark not started)" in out, out[-3000:]
    _check(wh, sim, after, records)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as answer:
            return answer.status, answer.read().decode().strip()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode().strip()


def _scraped(proc, port: int, condition) -> dict:
    """The service's metrics ({(name, label value): value}) once condition(metrics) holds."""
    deadline = time.monotonic() + TIMEOUT
    while True:
        assert proc.poll() is None, f"the service ended: {proc.stdout.read()[-3000:]}"
        assert time.monotonic() < deadline, "the service's metrics never showed the run"
        try:
            status, text = _get(port, "/metrics")
        except OSError:  # not listening yet (Spark starting)
            status, text = 0, ""
        if status == 200:
            metrics = {}
            for family in text_string_to_metric_families(text):
                for sample in family.samples:
                    # a table's metrics by its name (their database label is '' in a project of one)
                    label = sample.labels.get("table", next(iter(sample.labels.values()), None))
                    metrics[(sample.name, label)] = sample.value
            if condition(metrics):
                return metrics
        time.sleep(0.3)
