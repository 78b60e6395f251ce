"""Snapshots (README "Snapshots"): an initial snapshot establishes each table's state at its LSN
(changes at or below it ignored, later ones applied on top, history opening at the snapshot); a
cleanup gap is remedied by a new snapshot, which reconciles (keys it lacks deleted at its LSN,
changed rows a version, unchanged rows nothing) and keeps the history before the gap."""

from __future__ import annotations

import copy

import pytest

from runner import landing_writer
from runner.errors import PipelineFailed
from runner.simulate import ChangeRow, Simulator, Transaction, mask_bytes
from tests import expected
from tests.test_pipeline import FORMATS, TABLES, _check_marts


def _snapshot_transaction(now: dict, held: dict, lsn: int, time) -> Transaction:
    """A snapshot of the source state `now` at `lsn`, as the changes it stands for against what
    the marts held (`held`; both per table: key -> values): an insert for each new or changed
    key, a delete for each key it lacks; unchanged keys nothing."""
    tx = Transaction(commit_lsn=lsn, begin_lsn=lsn, begin_time=time, end_time=time)
    for spec in TABLES:
        full = mask_bytes({c.ordinal for c in spec.columns}, len(spec.columns))
        rows = [ChangeRow(lsn, lsn, 2, full, 1, dict(v)) for k, v in now[spec.name].items() if held[spec.name].get(k) != v]
        rows += [ChangeRow(lsn, lsn, 1, full, 1, dict(v)) for k, v in held[spec.name].items() if k not in now[spec.name]]
        tx.changes[spec.name] = rows
    return tx


def _snapshot_versions(monkeypatch, snapshots: set[int]) -> None:
    """Expected marts name a version a snapshot opened `snapshot`, not `insert`."""
    original = expected.transaction_versions

    def versions(spec, txs, upper=None):
        return {k: [(lsn, t, "snapshot" if int(lsn, 16) in snapshots and op == "insert" else op, v, o)
                    for lsn, t, op, v, o in vs] for k, vs in original(spec, txs, upper).items()}

    monkeypatch.setattr(expected, "transaction_versions", versions)


def test_an_initial_snapshot_then_a_gap_remedied_by_a_new_snapshot(pipeline, monkeypatch):
    sim = Simulator(TABLES, seed=31)
    landing = pipeline.landing
    empty = {t.name: {} for t in TABLES}
    # the source before the snapshot: its changes land too, and are ignored (the snapshot has them)
    before = sim.run(25)
    s1, at_s1 = before[-1].commit_lsn, copy.deepcopy(sim.state)
    landing_writer.write_captured_columns(landing, TABLES)
    landing_writer.write_batch(landing, "b0", TABLES, before, FORMATS, spark=pipeline.spark,
                               min_lsn={t.capture_instance: before[0].begin_lsn for t in TABLES})
    for spec in TABLES:
        landing_writer.write_snapshot(landing, "s1", spec, list(at_s1[spec.name].values()), s1)
    after = sim.run(20)
    landing_writer.write_batch(landing, "b1", TABLES, after, FORMATS, spark=pipeline.spark)

    pipeline.run()

    snapshot1 = _snapshot_transaction(at_s1, empty, s1, before[-1].end_time)
    _snapshot_versions(monkeypatch, {s1})
    _check_marts(pipeline, sim, after[-1].commit_lsn, transactions=[snapshot1, *after])
    held = copy.deepcopy(sim.state)

    # changes lost to cleanup: their mapping lands, their rows never do, capture now starts later
    lost = sim.run(15)
    s2, at_s2 = lost[-1].commit_lsn, copy.deepcopy(sim.state)
    landing_writer.write_batch(landing, "b2", [], [], {}, mapped=lost)
    later = sim.run(15)
    landing_writer.write_batch(landing, "b3", TABLES, later, FORMATS, spark=pipeline.spark,
                               min_lsn={t.capture_instance: s2 + 1 for t in TABLES})
    with pytest.raises(PipelineFailed, match="gap detected for tracked table customers.*Land a snapshot of customers"):
        pipeline.run()

    # the remedy: a snapshot at the end of the lost range reconciles; the history before it stays
    for spec in TABLES:
        landing_writer.write_snapshot(landing, "s2", spec, list(at_s2[spec.name].values()), s2)
    pipeline.run()

    snapshot2 = _snapshot_transaction(at_s2, held, s2, lost[-1].end_time)
    assert any(r.operation == 1 for rows in snapshot2.changes.values() for r in rows)  # keys deleted meanwhile
    _snapshot_versions(monkeypatch, {s1, s2})
    _check_marts(pipeline, sim, later[-1].commit_lsn, transactions=[snapshot1, *after, snapshot2, *later])
