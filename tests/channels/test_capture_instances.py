"""Capture-instance changes (docs/tables.md "Capture-instance changes"): a table switched to a second
capture instance that adds a column and leaves one out, both instances running side by side for a
while, then the first dropped. The marts equal the source as of each run's cut, nothing comes
twice, the added column appears in the existing marts (NULL before it was captured) without a
full refresh, the column left out keeps its last values, and each instance's mask is read with
its own ordinals."""

from __future__ import annotations

import io
import uuid

import pytest
import yaml

from cdc_simulator import landing_writer
from cdc_simulator.simulate import ChangeRow, Column, Simulator, TableSpec, Transaction, mask_bytes
from runner.run import report
from tests.conftest import Pipeline, copy_project
from tests.expected import check_marts
from tests.scenarios import KEY, NEW, OLD, TABLE, TYPES
from tests.scenarios import members_declaration as _declaration


def _spec(names: list[str], instance: str = "dbo_members", ordinals: list[str] | None = None) -> TableSpec:
    """The table as `names` (ordinals: positions in `ordinals`, default in `names`)."""
    order = ordinals or names
    return TableSpec("members", instance, KEY, tuple(Column(n, TYPES[n], order.index(n) + 1) for n in names))


def _declare(project, instances: list[dict]) -> None:
    """Declares members with these capture instances."""
    path = project / "dbt_project.yml"
    doc = yaml.safe_load(path.read_text())
    doc["vars"]["cdc_tracked_tables"] = {"members": _declaration(instances)}
    path.write_text(yaml.safe_dump(doc, sort_keys=False))


def _project_rows(txs: list[Transaction], source: TableSpec, instance: TableSpec) -> list[Transaction]:
    """What `instance` captured of `txs` (generated over `source`): its columns, its mask bits."""
    projected = []
    for tx in txs:
        rows = []
        for r in tx.changes.get("members", []):
            mask = int.from_bytes(r.update_mask, "big")
            bits = {c.ordinal for c in instance.columns
                    if mask >> (next(s.ordinal for s in source.columns if s.name == c.name) - 1) & 1}
            rows.append(ChangeRow(r.start_lsn, r.seqval, r.operation, mask_bytes(bits, len(instance.columns)),
                                  r.command_id, {c.name: r.values.get(c.name) for c in instance.columns}))
        projected.append(Transaction(tx.commit_lsn, tx.begin_lsn, tx.begin_time, tx.end_time, {"members": rows}))
    return projected


def _expected(phases: list[tuple[list[Transaction], set[str]]]) -> list[Transaction]:
    """The reference: each change in the table's columns, a column no live instance captured
    keeping the key's previous value in an update and NULL in an insert."""
    last: dict[tuple, dict] = {}
    out = []
    for txs, captured in phases:
        for tx in txs:
            rows = []
            for r in sorted(tx.changes.get("members", []), key=lambda r: (r.seqval, r.operation)):
                key = tuple(r.values[k] for k in KEY)
                before = last.get(key, {}) if r.operation in (3, 4) else {}
                values = {c: r.values.get(c) if c in captured else before.get(c) for c in TABLE}
                if r.operation != 3:
                    last[key] = values
                rows.append(ChangeRow(r.start_lsn, r.seqval, r.operation, r.update_mask, r.command_id, values))
            out.append(Transaction(tx.commit_lsn, tx.begin_lsn, tx.begin_time, tx.end_time, {"members": rows}))
    return out


def _run(pipeline) -> str:
    out = io.StringIO()
    pipeline.run(progress=report.Progress(stream=out))
    return out.getvalue()


@pytest.mark.scenario
def test_a_table_switched_to_a_new_capture_instance_with_an_added_column(spark, tmp_path):
    project = copy_project(tmp_path / "project", {"members": _declaration(None)}, replace=True)
    (tmp_path / "landing").mkdir()
    pipeline = Pipeline(spark, "ci_" + uuid.uuid4().hex[:8], tmp_path / "landing", project_dir=project)
    landing = pipeline.landing
    old, new = _spec(OLD), _spec(NEW, "dbo_members_v2")
    table_old = _spec(OLD, ordinals=TABLE)  # the marts' view before the switch

    # 1. one capture instance
    sim = Simulator([_spec(OLD)], seed=53)
    p1 = sim.run(30)
    landing_writer.write_captured_columns(landing, [old])
    landing_writer.write_change_tables(landing, "m0", [old], {"dbo_members": p1[0].begin_lsn})
    landing_writer.write_batch(landing, "b0", [old], p1[:15], {"members": "parquet"},
                               manifest=(None, p1[14].commit_lsn))
    _run(pipeline)
    check_marts(pipeline, sim, p1[14].commit_lsn, tables=[table_old], transactions=_expected([(p1, set(OLD))]))

    # 2. `tier` is added (NULL in existing rows) and a second instance created without `email`;
    # both capture side by side; the declaration lists both, oldest first
    # (copies: the simulator's rows are also its change rows' values)
    sim.state["members"] = {k: {**row, "tier": None} for k, row in sim.state["members"].items()}
    sim.deleted["members"] = [{**row, "tier": None} for row in sim.deleted["members"]]
    both = _spec(TABLE)
    sim.tables["members"] = both
    p2 = sim.run(30)
    _declare(project, [{"name": "dbo_members", "columns": OLD}, {"name": "dbo_members_v2", "columns": NEW}])
    landing_writer.write_captured_columns(landing, [old, new], "m1")
    landing_writer.write_change_tables(landing, "m1", [old, new], {"dbo_members": p1[0].begin_lsn,
                                                                   "dbo_members_v2": p2[0].begin_lsn})
    landing_writer.write_batch(landing, "b1", [old], [*p1[15:], *_project_rows(p2[:12], both, old)], {},
                               manifest=(p1[14].commit_lsn, p2[11].commit_lsn))
    landing_writer.write_export(landing, "b1", new, _project_rows(p2[:12], both, new), "parquet",
                                after=p1[-1].commit_lsn, through=p2[11].commit_lsn)
    _run(pipeline)
    table = _spec(TABLE)
    check_marts(pipeline, sim, p2[11].commit_lsn, tables=[table],
                 transactions=_expected([(p1, set(OLD)), (p2, set(TABLE))]))
    staged = pipeline.rows("select capture_instance, count(*) as n from {s}.stg_change_tables__members "
                           "group by capture_instance order by capture_instance")
    assert [r["capture_instance"] for r in staged] == ["dbo_members", "dbo_members_v2"]

    # 3. the new instance's export is a batch ahead of the old one's: the old one holds the cut
    landing_writer.write_batch(landing, "b2", [], [], {}, mapped=p2[12:])
    landing_writer.write_export(landing, "b2", new, _project_rows(p2[12:], both, new), "csv",
                                after=p2[11].commit_lsn, through=p2[-1].commit_lsn)
    output = _run(pipeline)
    assert "cut held back by members: its export (dbo_members) reaches" in output, output[-2000:]
    check_marts(pipeline, sim, p2[11].commit_lsn, tables=[table],
                 transactions=_expected([(p1, set(OLD)), (p2, set(TABLE))]))

    # 4. the old instance's last export lands and it is dropped, then `email` is dropped from
    # the source: the new instance alone captures; existing rows keep their last email
    landing_writer.write_export(landing, "b3", old, _project_rows(p2[12:], both, old), "csv",
                                after=p2[11].commit_lsn, through=p2[-1].commit_lsn)
    sim.deleted["members"] = [{k: v for k, v in row.items() if k != "email"} for row in sim.deleted["members"]]
    sim.tables["members"] = _spec(NEW)
    p3 = sim.run(30)
    landing_writer.write_batch(landing, "b3", [new], p3[:20], {"members": "csv"},
                               manifest=(p2[-1].commit_lsn, p3[19].commit_lsn))
    output = _run(pipeline)
    # the old instance, not declared dropped, still holds the cut where its exports end
    assert "cut held back by members: its export (dbo_members) reaches" in output, output[-2000:]
    expected = _expected([(p1, set(OLD)), (p2, set(TABLE)), (p3, set(NEW))])
    check_marts(pipeline, sim, p2[-1].commit_lsn, tables=[table], transactions=expected)

    # 5. declared dropped, it no longer holds the cut
    _declare(project, [{"name": "dbo_members", "columns": OLD, "dropped": True},
                       {"name": "dbo_members_v2", "columns": NEW}])
    landing_writer.write_batch(landing, "b4", [new], p3[20:], {"members": "parquet"},
                               manifest=(p3[19].commit_lsn, p3[-1].commit_lsn))
    output = _run(pipeline)
    assert "cut held back" not in output, output[-2000:]
    check_marts(pipeline, sim, p3[-1].commit_lsn, tables=[table], transactions=expected)
    # an update of a key the new instance captured after the drop kept the key's email
    kept = pipeline.rows("select count(*) as n from {s}.members_current where email is not null "
                         "and commit_lsn > '" + f"{p2[-1].commit_lsn:020X}" + "'")
    assert kept[0]["n"] > 0
    # masks read with each instance's ordinals: an update of credit_limit alone names it
    changed = pipeline.rows("select changed_columns from {s}.members_history where operation = 'update' "
                            "and valid_from_lsn > '" + f"{p1[-1].commit_lsn:020X}" + "'")
    assert changed and all(set(r["changed_columns"]) <= set(TABLE) - set(KEY) for r in changed)
    assert {"credit_limit", "tier", "email"} <= {c for r in changed for c in r["changed_columns"]}
