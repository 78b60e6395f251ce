"""Snapshots (docs/landing.md "Snapshots"): an initial snapshot establishes each table's state at its LSN
(changes at or below it ignored, later ones applied on top, history opening at the snapshot); a
cleanup gap is remedied by a new snapshot, which reconciles (keys it lacks deleted at its LSN,
changed rows a version, unchanged rows nothing) and keeps the history before the gap."""

from __future__ import annotations

import copy
import io

import pytest

from cdc_simulator import landing_writer
from cdc_simulator.simulate import ChangeRow, Simulator, Transaction, lsn_hex, mask_bytes
from runner.errors import PipelineFailed
from runner.run import report
from tests.expected import check_marts, snapshot_versions
from tests.scenarios import CHANGE_TABLES as TABLES
from tests.scenarios import FORMATS


def _snapshot_transaction(now: dict, held: dict, lsn: int, time, tables=TABLES) -> Transaction:
    """A snapshot of the source state `now` at `lsn`, as the changes it stands for against what
    the marts held (`held`; both per table: key -> values): an insert for each new or changed
    key, a delete for each key it lacks; unchanged keys nothing."""
    tx = Transaction(commit_lsn=lsn, begin_lsn=lsn, begin_time=time, end_time=time)
    for spec in tables:
        full = mask_bytes({c.ordinal for c in spec.columns}, len(spec.columns))
        rows = [ChangeRow(lsn, lsn, 2, full, 1, dict(v)) for k, v in now[spec.name].items() if held[spec.name].get(k) != v]
        rows += [ChangeRow(lsn, lsn, 1, full, 1, dict(v)) for k, v in held[spec.name].items() if k not in now[spec.name]]
        tx.changes[spec.name] = rows
    return tx


@pytest.mark.scenario
def test_an_initial_snapshot_then_a_gap_remedied_by_a_new_snapshot(pipeline, monkeypatch):
    sim = Simulator(TABLES, seed=31)
    landing = pipeline.landing
    empty = {t.name: {} for t in TABLES}
    # the source before the snapshot: its changes land too, and are ignored (the snapshot has them)
    before = sim.run(25)
    s1, at_s1 = before[-1].commit_lsn, copy.deepcopy(sim.state)
    landing_writer.write_captured_columns(landing, TABLES)
    landing_writer.write_batch(landing, "b0", TABLES, before, FORMATS,
                               min_lsn={t.capture_instance: before[0].begin_lsn for t in TABLES})
    for spec in TABLES:
        landing_writer.write_snapshot(landing, "s1", spec, list(at_s1[spec.name].values()), s1)
    after = sim.run(20)
    landing_writer.write_batch(landing, "b1", TABLES, after, FORMATS)

    pipeline.run()

    snapshot1 = _snapshot_transaction(at_s1, empty, s1, before[-1].end_time)
    snapshot_versions(monkeypatch, {s1})
    check_marts(pipeline, sim, after[-1].commit_lsn, transactions=[snapshot1, *after])
    held = copy.deepcopy(sim.state)

    # changes lost to cleanup: their mapping lands, their rows never do, capture now starts later
    lost = sim.run(15)
    s2, at_s2 = lost[-1].commit_lsn, copy.deepcopy(sim.state)
    landing_writer.write_batch(landing, "b2", [], [], {}, mapped=lost)
    later = sim.run(15)
    landing_writer.write_batch(landing, "b3", TABLES, later, FORMATS,
                               min_lsn={t.capture_instance: s2 + 1 for t in TABLES})
    with pytest.raises(PipelineFailed, match="gap detected for tracked table customers.*Land a snapshot of customers"):
        pipeline.run()

    # the remedy: a snapshot at the end of the lost range reconciles; the history before it stays
    for spec in TABLES:
        landing_writer.write_snapshot(landing, "s2", spec, list(at_s2[spec.name].values()), s2)
    pipeline.run()

    snapshot2 = _snapshot_transaction(at_s2, held, s2, lost[-1].end_time)
    assert any(r.operation == 1 for rows in snapshot2.changes.values() for r in rows)  # keys deleted meanwhile
    snapshot_versions(monkeypatch, {s1, s2})
    check_marts(pipeline, sim, later[-1].commit_lsn, transactions=[snapshot1, *after, snapshot2, *later])

    # a snapshot at or below the marts' watermark never applies: the run says so, nothing changes
    customers = TABLES[0]
    stale = after[-1].commit_lsn
    landing_writer.write_snapshot(landing, "s3", customers, list(held[customers.name].values()), stale)
    out = io.StringIO()
    pipeline.run(progress=report.Progress(stream=out))
    assert (f"WARNING snapshot of {customers.name}: the snapshot at 0x{lsn_hex(stale)} is at or below its marts' "
            "watermark") in out.getvalue(), out.getvalue()[-2000:]
    check_marts(pipeline, sim, later[-1].commit_lsn, transactions=[snapshot1, *after, snapshot2, *later])


@pytest.mark.scenario
def test_a_debezium_initial_snapshot_then_a_complete_snapshot_reconciles_and_an_incremental_one_never_deletes(
        spark, tmp_path, monkeypatch):
    """Debezium's snapshot rows (op r) establish the state at their LSN; after events were lost
    (connector offsets reset), a new complete snapshot (its rows marked first ... last)
    reconciles: keys it lacks are deleted at its LSN, changed rows get a version, unchanged rows
    nothing. An incremental snapshot (rows marked incremental) never deletes. The table keeps
    deleted keys (soft_deletes), with the values their delete carried: for a key the snapshot
    lacks, its last values."""
    from cdc_simulator import debezium_writer
    from tests.scenarios import DECLARED_COLUMNS, ITEMS
    from tests.scenarios import debezium_pipeline as _pipeline

    pipeline = _pipeline(spark, tmp_path, {"items": {
        "channel": "debezium", "source_database": "ShopDb", "source_schema": "dbo", "source_table": "items",
        "key": ["item_id"], "columns": DECLARED_COLUMNS, "soft_deletes": True}})
    folder = pipeline.landing / "debezium" / "server1.ShopDb.dbo.items"
    render = debezium_writer.Renderer(ITEMS, debezium_writer.DebeziumOptions(schema=True))
    sim = Simulator([ITEMS], seed=37)
    before = sim.run(25)
    s1, at_s1 = before[-1].commit_lsn, copy.deepcopy(sim.state)
    after = sim.run(20)
    debezium_writer.write_lines(folder / "b0.jsonl", render.snapshot(list(at_s1["items"].values()), s1,
                                                                   before[-1].end_time) + render.changes(after))
    pipeline.run()
    snapshot1 = _snapshot_transaction(at_s1, {"items": {}}, s1, before[-1].end_time, tables=[ITEMS])
    snapshot_versions(monkeypatch, {s1})
    check_marts(pipeline, sim, after[-1].commit_lsn, tables=[ITEMS], soft_deletes={"items"}, transactions=[snapshot1, *after])
    held = copy.deepcopy(sim.state)

    # events lost (the connector's offsets were reset); it snapshots again, then streams on
    lost = sim.run(20)
    s2, at_s2 = lost[-1].commit_lsn, copy.deepcopy(sim.state)
    later = sim.run(15)
    lines = render.snapshot(list(at_s2["items"].values()), s2, lost[-1].end_time)
    # the snapshot's rows arrive in two batches: only the one holding `last` completes it
    debezium_writer.write_lines(folder / "b1.jsonl", lines[: len(lines) // 2])
    pipeline.run()
    # half a snapshot deletes nothing: its rows are the state at s2, the keys it has not sent yet stay
    current = {r["item_id"] for r in pipeline.table("items_current", "item_id") if not r["is_deleted"]}
    assert set(held["items"]) <= {(k,) for k in current}
    debezium_writer.write_lines(folder / "b2.jsonl", lines[len(lines) // 2:] + render.changes(later))
    pipeline.run()
    snapshot2 = _snapshot_transaction(at_s2, held, s2, lost[-1].end_time, tables=[ITEMS])
    assert any(r.operation == 1 for r in snapshot2.changes["items"])  # keys deleted meanwhile
    assert len(snapshot2.changes["items"]) < len(at_s2["items"])  # unchanged keys: no version
    snapshot_versions(monkeypatch, {s1, s2})
    expected = [snapshot1, *after, snapshot2, *later]
    check_marts(pipeline, sim, later[-1].commit_lsn, tables=[ITEMS], soft_deletes={"items"}, transactions=expected)

    # an incremental snapshot of a few rows: they are unchanged, and the rows it lacks stay
    versions = pipeline.rows("select count(*) as n from {s}.items_history")[0]["n"]
    rows = list(sim.state["items"].values())[:3]
    debezium_writer.write_lines(folder / "b3.jsonl", render.snapshot(rows, later[-1].commit_lsn + 1, later[-1].end_time,
                                                                     incremental=True))
    pipeline.run()
    check_marts(pipeline, sim, later[-1].commit_lsn, tables=[ITEMS], soft_deletes={"items"}, transactions=expected)
    assert pipeline.rows("select count(*) as n from {s}.items_history")[0]["n"] == versions
