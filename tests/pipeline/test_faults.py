"""Safety of real runner processes on one warehouse: runs killed (SIGKILL of the process tree)
inside a landing append, inside a mart's MERGE and between the marts' commits and their
watermarks, then re-run, give the marts of uninterrupted runs with every landed record exactly
once; a reader during a run sees each mart before or after its commit, never in between; a
second runner exits 2 naming the holder, or waits with --wait (and, nothing having changed since
the holder's run, exits without starting Spark); a lock left by a killed run is taken over.

The runners are `python -m runner run` processes with their own state folder (the embedded
metastore admits one JVM); this test's session reads their Delta tables by path."""

from __future__ import annotations

import json
import os
import signal
import threading
import time

import pytest

from cdc_simulator.simulate import Simulator
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

    # every mart is at the state of a whole run: one of the landed batches' bounds
    before = {}
    for spec in TABLES:
        for mart in ("current", "history"):
            state = wh.mart_state(spec, mart)
            assert any(state == expected_state(spec, sim, upper, mart) for upper in uppers), f"{spec.name}_{mart}"
            before[(spec.name, mart)] = state

    # 4. the last re-run holds the lock while a session reads the marts (each read sees the state
    #    before the run or after it), a second runner exits 2 naming it and a third waits its turn
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

    holder = wh.start()
    reader = threading.Thread(target=read_while_running)
    reader.start()
    try:
        lock = tmp_path / "state" / "runner.run.lock"
        deadline = time.monotonic() + 120
        while not (lock.exists() and f'"pid": {holder.pid}' in lock.read_text()):
            assert holder.poll() is None and time.monotonic() < deadline, "the first runner never took the lock"
            time.sleep(0.05)
        refused = wh.start()
        out, _ = refused.communicate(timeout=120)
        assert refused.returncode == 2, out
        last = out.strip().splitlines()[-1]
        assert "FAILED: another runner holds this warehouse" in last and f"pid {holder.pid} on host" in last, last
        waiting = wh.start("--wait", str(TIMEOUT))
        for proc in (holder, waiting):
            out, _ = proc.communicate(timeout=TIMEOUT)
            assert proc.returncode == 0, out[-3000:]
    finally:
        done.set()
        reader.join()
    assert not errors, errors
    assert "before" in seen, "the reader never read during the run"
    assert "waiting up to" in out and "nothing new landed" in out
    # the holder's run succeeded and nothing changed since: the waiting run exits before Spark
    assert "nothing to build (Spark not started)" in out, out[-3000:]
    _check(wh, sim, after, records)
