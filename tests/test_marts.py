"""Mart behaviour at the edges: batch boundaries inside a transaction's rows, empty and
delete-only batches, re-inserts and key changes, gap detection, runs killed at any point,
time travel."""

from __future__ import annotations

import copy
import json

import pytest

from runner import landing_writer
from runner.dbt import Dbt
from runner.errors import PipelineFailed
from runner.simulate import Simulator, lsn_hex
from tests.test_pipeline import FORMATS, NAMES, TABLES, _check_marts, _land


def _split(tx, n_rows):
    """Two partial copies of a transaction: its first n change rows and the rest."""
    first, rest = copy.copy(tx), copy.copy(tx)
    rows = [(name, r) for name, table_rows in tx.changes.items() for r in table_rows]
    first.changes, rest.changes = {}, {}
    for i, (name, r) in enumerate(rows):
        (first if i < n_rows else rest).changes.setdefault(name, []).append(r)
    return first, rest


def test_batch_boundary_inside_a_transaction_waits_for_its_commit(pipeline):
    sim = Simulator(TABLES, seed=41)
    txs = sim.run(30)
    big = sim.transaction(statements=6)
    head, tail = _split(big, 3)
    landing_writer.write_captured_columns(pipeline.landing, TABLES)
    # batch 1: 30 transactions and the first rows of a 31st whose commit is not mapped yet
    landing_writer.write_batch(pipeline.landing, "b1", TABLES, [*txs, head], FORMATS, spark=pipeline.spark,
                               min_lsn={t.capture_instance: txs[0].begin_lsn for t in TABLES}, mapped=txs)
    summary = pipeline.run()
    assert {r["lsn_reached"] for r in summary if r["tracked_table"] in NAMES} == {lsn_hex(txs[-1].commit_lsn)}
    _check_marts(pipeline, sim, txs[-1].commit_lsn)
    landing_writer.write_batch(pipeline.landing, "b2", TABLES, [tail], FORMATS, spark=pipeline.spark, mapped=[big])
    pipeline.run()
    _check_marts(pipeline, sim, big.commit_lsn)


def test_empty_delete_only_reinsert_and_key_change_batches(pipeline):
    sim = Simulator(TABLES, seed=43)
    _land(pipeline, sim, sim.run(40), "b1", first=True)
    pipeline.run()
    pipeline.run()  # an empty batch: nothing landed, nothing changes
    _check_marts(pipeline, sim, sim.transactions[-1].commit_lsn)
    batches = {
        "deletes": ("delete",),
        "reinserts": ("reinsert",),
        "key_changes": ("pk_update",),
        "mixed": None,
    }
    for name, kinds in batches.items():
        txs = [sim.transaction(statements=2, kinds=kinds) for _ in range(6)]
        operations = {r.operation for tx in txs for rows in tx.changes.values() for r in rows}
        expected = {"deletes": {1}, "reinserts": {2}, "key_changes": {1, 2}}.get(name)
        assert expected is None or operations == expected, (name, operations)
        _land(pipeline, sim, txs, name)
        pipeline.run()
        _check_marts(pipeline, sim, txs[-1].commit_lsn)


def test_gap_stops_the_run_naming_table_range_and_remedy(pipeline):
    sim = Simulator(TABLES, seed=47)
    first = sim.run(20)
    _land(pipeline, sim, first, "b1", first=True)
    pipeline.run()
    # The mart fell behind: cleanup moved the low end of dbo_customers past changes never landed.
    lost = sim.run(10)
    later = sim.run(10)
    landing_writer.write_batch(pipeline.landing, "b3", TABLES, later, FORMATS, spark=pipeline.spark,
                               min_lsn={t.capture_instance: later[0].begin_lsn for t in TABLES})
    with pytest.raises(PipelineFailed) as failure:
        pipeline.run()
    message = str(failure.value)
    needed = f"{first[-1].commit_lsn + 1:020X}"
    assert f"gap detected for tracked table customers (customers_current): it needs changes from LSN {needed}" in message
    assert f"now starts at {lsn_hex(later[0].begin_lsn)}" in message
    assert "python -m runner run --full-refresh" in message
    assert lost  # the changes that were lost
    # the marts keep the state they had; the watermark did not move
    _check_marts(pipeline, sim, first[-1].commit_lsn)
    rows = pipeline.rows("select max_by(watermark_lsn, recorded_at) as w from {s}.cdc_watermarks "
                         "where model_name = 'customers_current'")
    assert rows == [{"w": lsn_hex(first[-1].commit_lsn)}]


def test_a_run_killed_at_any_point_and_rerun_gives_the_same_marts(pipeline, monkeypatch):
    sim = Simulator(TABLES, seed=53)
    _land(pipeline, sim, sim.run(30), "b1", first=True)
    pipeline.run()

    # 1. killed after landing, before dbt ran
    _land(pipeline, sim, sim.run(15), "b2")
    monkeypatch.setattr(Dbt, "build", lambda self, select, full_refresh: (_ for _ in ()).throw(KeyboardInterrupt()))
    with pytest.raises(KeyboardInterrupt):
        pipeline.run()
    monkeypatch.undo()
    pipeline.run()
    _check_marts(pipeline, sim, sim.transactions[-1].commit_lsn)

    # 2. killed mid-build: one mart written (and its watermark advanced), the others not
    _land(pipeline, sim, sim.run(15), "b3")
    original = Dbt.build

    def partial_build(self, select, full_refresh):
        original(self, ["customers_current", "order_lines_history"], full_refresh)
        raise KeyboardInterrupt()

    monkeypatch.setattr(Dbt, "build", partial_build)
    with pytest.raises(KeyboardInterrupt):
        pipeline.run()
    monkeypatch.undo()
    pipeline.run()
    _check_marts(pipeline, sim, sim.transactions[-1].commit_lsn)

    # 3. killed after the marts were written, before the on-run-end hook recorded watermarks
    _land(pipeline, sim, sim.run(15), "b4")
    pipeline.run()
    _forget_last_watermarks(pipeline)
    pipeline.run()
    _check_marts(pipeline, sim, sim.transactions[-1].commit_lsn)


def _forget_last_watermarks(pipeline):
    """Rewrites the (parquet, append-only) watermark table without its latest run's rows."""
    table = f"{pipeline.schema}.cdc_watermarks"
    kept = pipeline.spark.sql(
        f"select * from {table} where invocation_id != (select max_by(invocation_id, recorded_at) from {table})"
    ).collect()
    pipeline.spark.sql(f"truncate table {table}")
    if kept:
        pipeline.spark.createDataFrame(kept, pipeline.spark.table(table).schema).write.insertInto(table)


def test_as_of_returns_the_state_at_an_lsn_or_a_time(pipeline, render):
    from tests.expected import current_state

    sim = Simulator(TABLES, seed=59)
    txs = sim.run(40)
    _land(pipeline, sim, txs, "b1", first=True)
    pipeline.run()
    spec = next(t for t in TABLES if t.name == "order_lines")
    for tx in (txs[5], txs[22], txs[-1]):
        expected = current_state(spec, sim.transactions, tx.commit_lsn)
        by_lsn = render(f"select * from {{{{ sqlserver_cdc.as_of('order_lines', lsn=\"'{lsn_hex(tx.commit_lsn)}'\") }}}}")
        at = f"timestamp'{tx.end_time.isoformat(sep=' ')}'"
        by_time = render(f"select * from {{{{ sqlserver_cdc.as_of('order_lines', at=\"{at}\") }}}}")
        for got in (by_lsn, by_time):
            assert {(r["order_id"], r["line_no"]): r["quantity"] for r in got} == \
                {k: v["quantity"] for k, v in expected.items()}


def test_soft_deletes_and_explicit_delete_versions(spark, tmp_path):
    import uuid

    import yaml

    from tests.conftest import EVENT_TABLES, PROJECT_DIR, Pipeline, copy_project
    from tests.expected import transaction_versions

    declared = yaml.safe_load((PROJECT_DIR / "dbt_project.yml").read_text())["vars"]["cdc_tracked_tables"]
    options = {"soft_deletes": True, "history_delete_versions": True}
    project = copy_project(tmp_path / "project", {"customers": {**declared["customers"], **options}},
                           drop=EVENT_TABLES)
    (tmp_path / "landing").mkdir()
    pipeline = Pipeline(spark, "t_" + uuid.uuid4().hex[:8], tmp_path / "landing", project_dir=project)
    sim = Simulator(TABLES, seed=61)
    _land(pipeline, sim, sim.run(40), "b1", first=True)
    pipeline.run()
    _land(pipeline, sim, [sim.transaction(statements=3, kinds=("delete",)) for _ in range(4)], "b2")
    pipeline.run()
    spec = next(t for t in TABLES if t.name == "customers")
    versions = transaction_versions(spec, sim.transactions)
    current = {(r["customer_id"],): r for r in pipeline.table("customers_current", "customer_id")}
    assert set(current) == set(versions)
    deleted = {k for k, v in versions.items() if v[-1][2] == "delete"}
    assert deleted and {k for k, r in current.items() if r["is_deleted"]} == deleted
    assert all(current[k]["operation"] == "delete" for k in deleted)
    history = pipeline.table("customers_history", "customer_id, valid_from_lsn")
    got = [((r["customer_id"],), r["valid_from_lsn"], r["operation"], r["is_deleted"], r["valid_to_lsn"], r["is_current"])
           for r in history]
    want = []
    for key in sorted(versions):
        vs = versions[key]
        for i, (lsn, _, op, _, _) in enumerate(vs):
            following = vs[i + 1][0] if i + 1 < len(vs) else None
            want.append((key, lsn, op, op == "delete", following, following is None and op != "delete"))
    assert got == want
    # the order_lines declaration kept the defaults: no deleted rows anywhere
    assert pipeline.rows("select count(*) as n from {s}.order_lines_current where is_deleted")[0]["n"] == 0


HISTORY_COLUMNS = {"customers": ["credit_limit", "IS_ACTIVE"], "order_lines": ["quantity"]}


def test_history_on_chosen_columns_folds_other_updates_into_the_open_version(spark, tmp_path):
    import uuid

    import yaml

    from tests.conftest import EVENT_TABLES, PROJECT_DIR, Pipeline, copy_project
    from tests.expected import history

    declared = yaml.safe_load((PROJECT_DIR / "dbt_project.yml").read_text())["vars"]["cdc_tracked_tables"]
    project = copy_project(tmp_path / "project", {
        name: {**declared[name], "history_columns": columns} for name, columns in HISTORY_COLUMNS.items()},
        drop=EVENT_TABLES)
    (tmp_path / "landing").mkdir()
    pipeline = Pipeline(spark, "t_" + uuid.uuid4().hex[:8], tmp_path / "landing", project_dir=project)
    tracked = {name: [c.lower() for c in columns] for name, columns in HISTORY_COLUMNS.items()}
    sim = Simulator(TABLES, seed=67)
    _land(pipeline, sim, sim.run(60), "b1", first=True)
    pipeline.run()
    _check_marts(pipeline, sim, sim.transactions[-1].commit_lsn, tracked)
    # later batches fold untracked updates into versions stored by earlier runs
    for batch in ("b2", "b3"):
        _land(pipeline, sim, [sim.transaction(statements=3, kinds=("update",)) for _ in range(12)] + sim.run(8), batch)
        pipeline.run()
        _check_marts(pipeline, sim, sim.transactions[-1].commit_lsn, tracked)
    for spec in TABLES:  # the option made a difference: some updates were folded
        assert len(history(spec, sim.transactions, None, tracked[spec.name])) < len(history(spec, sim.transactions))
    # the full refresh gives the same history
    pipeline.run(full_refresh=True)
    _check_marts(pipeline, sim, sim.transactions[-1].commit_lsn, tracked)


@pytest.mark.parametrize("columns, message", [
    ([], "history_columns must be a non-empty list"),
    ("email", "history_columns must be a non-empty list"),
    (["email", "phone"], "history_columns names 'phone', which is not among its columns"),
])
def test_history_columns_declaration_errors(columns, message):
    import yaml

    from tests.conftest import PROJECT_DIR, compile_sql

    tables = yaml.safe_load((PROJECT_DIR / "dbt_project.yml").read_text())["vars"]["cdc_tracked_tables"]
    tables["customers"]["history_columns"] = columns
    with pytest.raises(AssertionError, match=message):
        compile_sql("{{ sqlserver_cdc.tracked_table('customers') }}", vars={"cdc_tracked_tables": tables})


def _merge(stored: list[dict], source: list[dict], match: list[str], mart: str) -> list[dict]:
    """MERGE semantics of sqlserver_cdc.mart_merge_sql (defaults: no soft deletes), in Python."""
    rows = {tuple(r[c] for c in match): r for r in stored}
    for s in source:
        key = tuple(s[c] for c in match)
        d = rows.get(key)
        if mart == "history":
            rows[key] = s
        elif d is None:
            if not s["is_deleted"]:
                rows[key] = s
        elif s["commit_lsn"] >= d["commit_lsn"]:
            if s["is_deleted"]:
                del rows[key]
            else:
                rows[key] = s
    return list(rows.values())


def test_merge_path_returns_the_rows_whose_merge_gives_the_marts(spark, tmp_path):
    """Delta/Iceberg cannot run here (no jars), so the merge path is checked in its two halves:
    the marts compiled with incremental_strategy merge return rows which, merged into the stored
    marts by MERGE's rules, give the expected marts; and the MERGE statement parses in Spark."""
    import uuid

    import yaml
    from dbt.cli.main import dbtRunner

    from runner import landing
    from runner.dbt import Dbt
    from tests.conftest import PROJECT_DIR, Pipeline, compile_sql, copy_project
    from tests.expected import current_state, history

    # the whole demo: the CES and Debezium marts must exist for their incremental compile to refuse MERGE
    (tmp_path / "landing").mkdir()
    pipeline = Pipeline(spark, "t_" + uuid.uuid4().hex[:8], tmp_path / "landing")
    project = copy_project(tmp_path / "merge_project", {})
    config = yaml.safe_load((project / "dbt_project.yml").read_text())
    config["models"]["sqlserver_cdc"]["marts"].update({"+file_format": "delta", "+incremental_strategy": "merge"})
    (project / "dbt_project.yml").write_text(yaml.safe_dump(config, sort_keys=False))
    # dbt's get_merge_sql dispatches to the package's merge for the marts only
    probe = "{{{{ config(materialized='ephemeral'{}) }}}}{{{{ get_merge_sql('t', 's', 'customer_id', none, none) }}}}"
    (project / "models/probe_mart.sql").write_text(
        probe.format(", meta={'cdc_mart': 'current_state', 'cdc_table': 'customers'}"))
    (project / "models/probe_other.sql").write_text(probe.format(""))

    sim = Simulator(TABLES, seed=71)
    _land(pipeline, sim, sim.run(50), "b1", first=True)
    pipeline.run()
    _land(pipeline, sim, sim.run(20) + [sim.transaction(statements=2, kinds=("delete",)) for _ in range(4)], "b2")
    landing.land(Dbt(PROJECT_DIR, "local"), pipeline.landing, pipeline.target.raw_schema, "b2")
    vars_arg = ["--vars", json.dumps({"cdc_raw_schema": pipeline.target.raw_schema})]
    # on an incremental run, CES marts refuse MERGE with a clear error (a late event can remove versions) ...
    refused = dbtRunner().invoke(["--quiet", "--log-level", "none", "compile", "--select", "employees_history",
                                  "--project-dir", str(project), "--profiles-dir", str(PROJECT_DIR), *vars_arg])
    assert not refused.success
    assert "incremental_strategy merge is not supported for channels whose events arrive out of order" in str(
        refused.exception)
    # ... so they (and Debezium's) stay on insert_overwrite while the change-table marts merge
    for event_table in ("employees", "products"):  # CES and Debezium
        config["models"]["sqlserver_cdc"]["marts"][event_table] = {"+file_format": "parquet",
                                                                   "+incremental_strategy": "insert_overwrite"}
    (project / "dbt_project.yml").write_text(yaml.safe_dump(config, sort_keys=False))

    result = dbtRunner().invoke(["--quiet", "--log-level", "none", "compile", "--select", "marts", "probe_mart", "probe_other",
                                 "--project-dir", str(project), "--profiles-dir", str(PROJECT_DIR), *vars_arg])
    assert result.success, result.exception.__context__ or result.exception
    compiled = {r.node.name: r.node.compiled_code for r in result.result.results}
    assert "then delete" in compiled["probe_mart"] and "commit_lsn >= dest.commit_lsn" in compiled["probe_mart"]
    assert "DBT_INTERNAL_SOURCE" in compiled["probe_other"] and "delete" not in compiled["probe_other"]
    upper = sim.transactions[-1].commit_lsn
    deletes_matched = 0
    for spec in TABLES:
        key = ", ".join(spec.key)
        for mart, match, expected in (
            ("current_state", list(spec.key), current_state(spec, sim.transactions, upper)),
            ("history", [*spec.key, "valid_from_lsn"], history(spec, sim.transactions, upper)),
        ):
            model = f"{spec.name}_{'current' if mart == 'current_state' else 'history'}"
            assert "cdc_watermarks" in compiled[model]  # compiled as an incremental run
            source = [r.asDict(recursive=True) for r in pipeline.spark.sql(compiled[model]).collect()]
            stored = pipeline.table(model, key)
            if mart == "current_state":
                stored_keys = {tuple(r[c] for c in spec.key) for r in stored}
                deletes_matched += sum(1 for r in source if r["is_deleted"] and tuple(r[c] for c in spec.key) in stored_keys)
            merged = {tuple(r[c] for c in match): r for r in _merge(stored, source, match, mart)}
            assert set(merged) == set(expected), f"{model}: merged keys differ"
            for k, want in expected.items():
                for column, value in want.items():
                    assert merged[k][column] == value, f"{model} {k} {column}"
            statement = compile_sql(f"{{{{ sqlserver_cdc.mart_merge_sql('{pipeline.schema}.{model}', 'src_view', "
                                    f"'{spec.name}', '{mart}') }}}}")
            pipeline.spark._jsparkSession.sessionState().sqlParser().parsePlan(statement)
    assert deletes_matched > 0  # the delete clause was exercised


def test_a_run_that_removes_the_last_rows_of_a_bucket_empties_it(spark, tmp_path):
    """Dynamic partition overwrite skips partitions the model returns no row for: the marts mark
    emptied buckets and the post-hook drops them, so deleted keys do not survive there."""
    import uuid

    import yaml

    from tests.conftest import EVENT_TABLES, PROJECT_DIR, Pipeline, copy_project

    declared = yaml.safe_load((PROJECT_DIR / "dbt_project.yml").read_text())["vars"]["cdc_tracked_tables"]
    project = copy_project(tmp_path / "project", {"customers": {**declared["customers"], "buckets": 1}},
                           drop=EVENT_TABLES)
    (tmp_path / "landing").mkdir()
    pipeline = Pipeline(spark, "t_" + uuid.uuid4().hex[:8], tmp_path / "landing", project_dir=project)
    sim = Simulator(TABLES, seed=73)
    _land(pipeline, sim, sim.run(20), "b1", first=True)
    pipeline.run()
    assert pipeline.rows("select count(*) as n from {s}.customers_current")[0]["n"] > 0
    deletes = []
    while sim.state["customers"] and len(deletes) < 200:
        deletes.append(sim.transaction(statements=3, kinds=("delete",)))
    assert not sim.state["customers"]
    _land(pipeline, sim, deletes, "b2")
    pipeline.run()
    _check_marts(pipeline, sim, sim.transactions[-1].commit_lsn)
    assert pipeline.rows("select count(*) as n from {s}.customers_current") == [{"n": 0}]
    assert pipeline.rows("select count(*) as n from {s}.customers_history where customer_id is null") == [{"n": 0}]
