"""Mart behaviour at the edges: batch boundaries inside a transaction's rows, delete-only
batches, re-inserts and key changes, gap detection, the options, and the MERGE that applies a
small batch with deletion vectors (as_of: tests/pipeline/test_pipeline.py). (Runs killed at any instant:
tests/pipeline/test_faults.py.)"""

from __future__ import annotations

import copy

import pytest

from cdc_simulator import landing_writer
from cdc_simulator.simulate import Simulator, lsn_hex
from runner.errors import PipelineFailed
from runner.run.dbt import Dbt, failures
from tests.expected import check_marts
from tests.scenarios import CHANGE_TABLES as TABLES
from tests.scenarios import FORMATS, NAMES
from tests.scenarios import land_changes as _land


def _split(tx, n_rows):
    """Two partial copies of a transaction: its first n change rows and the rest."""
    first, rest = copy.copy(tx), copy.copy(tx)
    rows = [(name, r) for name, table_rows in tx.changes.items() for r in table_rows]
    first.changes, rest.changes = {}, {}
    for i, (name, r) in enumerate(rows):
        (first if i < n_rows else rest).changes.setdefault(name, []).append(r)
    return first, rest


@pytest.mark.scenario
def test_batch_boundary_inside_a_transaction_waits_for_its_commit(pipeline):
    sim = Simulator(TABLES, seed=41)
    txs = sim.run(30)
    big = sim.transaction(statements=6)
    head, tail = _split(big, 3)
    landing_writer.write_captured_columns(pipeline.landing, TABLES)
    # batch 1: 30 transactions and the first rows of a 31st whose commit is not mapped yet
    landing_writer.write_batch(pipeline.landing, "b1", TABLES, [*txs, head], FORMATS,
                               min_lsn={t.capture_instance: txs[0].begin_lsn for t in TABLES}, mapped=txs)
    summary = pipeline.run()
    assert {r["lsn_reached"] for r in summary if r["tracked_table"] in NAMES} == {lsn_hex(txs[-1].commit_lsn)}
    check_marts(pipeline, sim, txs[-1].commit_lsn)
    landing_writer.write_batch(pipeline.landing, "b2", TABLES, [tail], FORMATS, mapped=[big])
    pipeline.run()
    check_marts(pipeline, sim, big.commit_lsn)


@pytest.mark.scenario
def test_delete_only_reinsert_and_key_change_batches(pipeline):
    """Batches of one kind of change each (an empty batch: tests/pipeline/test_pipeline.py's re-run)."""
    sim = Simulator(TABLES, seed=43)
    _land(pipeline, sim, sim.run(40), "b1", first=True)
    pipeline.run()
    check_marts(pipeline, sim, sim.transactions[-1].commit_lsn)
    batches = {
        "deletes": ("delete",),
        "reinserts": ("reinsert",),
        "key_changes": ("pk_update",),
    }
    for name, kinds in batches.items():
        txs = [sim.transaction(statements=2, kinds=kinds) for _ in range(6)]
        operations = {r.operation for tx in txs for rows in tx.changes.values() for r in rows}
        expected = {"deletes": {1}, "reinserts": {2}, "key_changes": {1, 2}}[name]
        assert operations == expected, (name, operations)
        _land(pipeline, sim, txs, name)
        pipeline.run()
        check_marts(pipeline, sim, txs[-1].commit_lsn)


@pytest.mark.scenario
def test_gap_stops_the_run_naming_table_range_and_remedy(pipeline):
    sim = Simulator(TABLES, seed=47)
    first = sim.run(20)
    _land(pipeline, sim, first, "b1", first=True)
    pipeline.run()
    # The mart fell behind: cleanup moved the low end of dbo_customers past changes never landed.
    lost = sim.run(10)
    later = sim.run(10)
    landing_writer.write_batch(pipeline.landing, "b3", TABLES, later, FORMATS,
                               min_lsn={t.capture_instance: later[0].begin_lsn for t in TABLES})
    with pytest.raises(PipelineFailed) as failure:
        pipeline.run()
    message = str(failure.value)
    needed = f"{first[-1].commit_lsn + 1:020X}"
    assert f"gap detected for tracked table customers: its marts need changes from LSN {needed}" in message
    assert f"now starts at {lsn_hex(later[0].begin_lsn)}" in message
    assert f"Land a snapshot of customers taken at or after LSN {lsn_hex(later[0].begin_lsn - 1)}" in message
    assert lost  # the changes that were lost
    # the marts keep the state they had; the watermark did not move
    check_marts(pipeline, sim, first[-1].commit_lsn)
    rows = pipeline.rows("select max_by(watermark_lsn, recorded_at) as w from {s}.cdc_watermarks "
                         "where model_name = 'customers_current'")
    assert rows == [{"w": lsn_hex(first[-1].commit_lsn)}]
    # a plain dbt build of the table's mart stops at the same gap (it follows the run's plan)
    plain = Dbt(pipeline.project_dir, "local", {"cdc_raw_schema": pipeline.target.raw_schema})
    failed = failures(plain.build(["customers_current"], False))
    assert any(f"gap detected for tracked table customers: its marts need changes from LSN {needed}" in f
               for f in failed), failed
    # the bound is the runner's: a plain build given one is refused with the remedy
    failed = failures(plain.build(["customers_current"], False, run_vars={"cdc_upper_lsn": needed}))
    assert any("var cdc_upper_lsn is no longer read" in f and "python -m runner run --upper-lsn" in f for f in failed), failed
    assert pipeline.rows("select max_by(watermark_lsn, recorded_at) as w from {s}.cdc_watermarks "
                         "where model_name = 'customers_current'") == rows


@pytest.mark.scenario
def test_a_mart_build_refuses_a_row_that_breaks_a_check_and_writes_nothing(pipeline):
    """An incremental run checks what its MERGEs write inside them (_mart_guard; its batch check
    query reads staging only): a trusted staged row with a NULL key in the window (injected past
    staging's validation, which quarantines such rows) fails the history build naming the table,
    the check and the row, nothing of that mart is written and its watermark holds; with the row
    gone, the next run applies the window."""
    sim = Simulator(TABLES, seed=53)
    first = sim.run(10)
    _land(pipeline, sim, first, "b1", first=True)
    pipeline.run()
    later = sim.run(6)
    assert any(tx.changes.get("customers") for tx in later)
    _land(pipeline, sim, later, "b2")
    staged = f"{pipeline.schema}.stg_change_tables__customers"
    # an insert or update-after (an update-before row alone is no change: its transaction would
    # drop out before the guard), the same row whatever order the files are read in
    sample = (pipeline.spark.table(staged).where("quarantine_reason is null and operation_code in (2, 4)")
              .orderBy("commit_lsn", "change_lsn").limit(1))
    assert len(sample.collect()[0]["commit_lsn"]) == 20  # the staged LSN form: 20 hex digits
    lsn = f"{later[-1].commit_lsn:020X}"
    from pyspark.sql import functions as F
    bad = (sample.withColumn("customer_id", F.lit(None).cast(sample.schema["customer_id"].dataType))
           .withColumn("commit_lsn", F.lit(lsn)).withColumn("change_lsn", F.lit(lsn)))
    bad.write.format("delta").mode("append").saveAsTable(staged)
    history_version = pipeline.rows("describe history {s}.customers_history")[0]["version"]
    with pytest.raises(PipelineFailed) as failure:
        pipeline.run()
    message = str(failure.value)
    assert "cdc check failed: customers history: key or valid_from_lsn has a NULL part: " \
           f'{{"valid_from_lsn":"{lsn}"}}' in message, message
    assert pipeline.rows("describe history {s}.customers_history")[0]["version"] == history_version
    assert pipeline.rows("select max_by(watermark_lsn, recorded_at) as w from {s}.cdc_watermarks "
                         "where model_name = 'customers_history'") == [{"w": lsn_hex(first[-1].commit_lsn)}]
    pipeline.spark.sql(f"delete from {staged} where customer_id is null")
    pipeline.run()
    check_marts(pipeline, sim, later[-1].commit_lsn)


def test_mart_guard_passes_good_rows_and_fails_on_the_first_broken_rule(render):
    """The folded checks' predicate: true for a good row; for a bad one the statement fails with
    the table, the mart, the first rule it breaks and the row."""
    guard = ("{{ sqlserver_cdc._mart_guard(sqlserver_cdc.tracked_table('customers'), 'current state', "
             "{'key has a NULL part': 'k is null', 'commit_lsn NULL': 'lsn is null'}, ['k', 'lsn']) }}")
    rows = render("select k from values (1, 'a'), (2, 'b') as t(k, lsn) where " + guard)
    assert rows == [{"k": 1}, {"k": 2}]
    with pytest.raises(Exception, match=r'cdc check failed: customers current state: commit_lsn NULL: \{"k":2\}\. '
                                        r'Nothing of this build was written'):
        render("select k from values (1, 'a'), (2, null) as t(k, lsn) where " + guard)
    # a row that breaks both rules is refused for the first, in the order the rules are given
    with pytest.raises(Exception, match=r'cdc check failed: customers current state: key has a NULL part: \{\}\. '):
        render("select k from values (1, 'a'), (null, null) as t(k, lsn) where " + guard)


def _check_soft_deletes(pipeline, sim, spec) -> None:
    """With soft_deletes and history_delete_versions: a deleted key stays in the current state
    flagged, and its history ends with a version for the delete."""
    from tests.expected import transaction_versions

    versions = transaction_versions(spec, sim.transactions)
    current = {(r["customer_id"],): r for r in pipeline.table("customers_current", "customer_id")}
    assert set(current) == set(versions)
    deleted = {k for k, v in versions.items() if v[-1][2] == "delete"}
    assert deleted and {k for k, r in current.items() if r["is_deleted"]} == deleted
    assert all(current[k]["operation"] == "delete" for k in deleted)
    # a deleted key keeps the values its delete carried: the deleted row's
    assert all({c.name: current[k][c.name] for c in spec.columns} == versions[k][-1][3] for k in deleted)
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


@pytest.mark.scenario
def test_table_options_soft_deletes_delete_versions_and_history_on_chosen_columns(spark, tmp_path):
    """One project with the options: customers keeps deleted keys (soft_deletes) and a version
    per delete (history_delete_versions); order_lines keeps history on chosen columns only
    (history_columns, names matched case-insensitively), folding other updates into the open
    version, also across runs and under a full refresh."""
    import uuid

    import yaml

    from tests.conftest import EVENT_TABLES, PROJECT_DIR, Pipeline, copy_project
    from tests.expected import history

    declared = yaml.safe_load((PROJECT_DIR / "dbt_project.yml").read_text())["vars"]["cdc_tracked_tables"]
    project = copy_project(tmp_path / "project", {
        "customers": {**declared["customers"], "soft_deletes": True, "history_delete_versions": True},
        "order_lines": {**declared["order_lines"], "history_columns": ["QUANTITY", "unit_price"]},
    }, drop=EVENT_TABLES)
    (tmp_path / "landing").mkdir()
    pipeline = Pipeline(spark, "t_" + uuid.uuid4().hex[:8], tmp_path / "landing", project_dir=project)
    customers, order_lines = (next(t for t in TABLES if t.name == name) for name in ("customers", "order_lines"))
    tracked = {"order_lines": ["quantity", "unit_price"]}
    sim = Simulator(TABLES, seed=67)
    _land(pipeline, sim, sim.run(60), "b1", first=True)
    pipeline.run()
    check_marts(pipeline, sim, sim.transactions[-1].commit_lsn, tracked, tables=[order_lines])
    # a later batch folds untracked updates into versions stored by the first run, and deletes
    _land(pipeline, sim, [sim.transaction(statements=3, kinds=("update",)) for _ in range(16)] + sim.run(8)
          + [sim.transaction(statements=3, kinds=("delete",)) for _ in range(4)], "b2")
    pipeline.run()
    check_marts(pipeline, sim, sim.transactions[-1].commit_lsn, tracked, tables=[order_lines])
    _check_soft_deletes(pipeline, sim, customers)
    # the option made a difference: some updates were folded
    assert len(history(order_lines, sim.transactions, None, tracked["order_lines"])) < len(
        history(order_lines, sim.transactions))
    # order_lines kept the default delete handling: no deleted rows
    assert pipeline.rows("select count(*) as n from {s}.order_lines_current where is_deleted")[0]["n"] == 0
    # the full refresh gives the same marts
    pipeline.run(full_refresh=True)
    check_marts(pipeline, sim, sim.transactions[-1].commit_lsn, tracked, tables=[order_lines])
    _check_soft_deletes(pipeline, sim, customers)

    # changes lost to cleanup, remedied by snapshots: the customers it lacks are deleted at its
    # LSN and, kept (soft_deletes) and versioned (history_delete_versions), hold the values the
    # marts held, as a deleted row's change does (not NULLs)
    held = copy.deepcopy(sim.state["customers"])
    lost = sim.run(6)
    at_s = copy.deepcopy(sim.state)
    snapshot_lsn = lost[-1].commit_lsn
    landing_writer.write_batch(pipeline.landing, "b3", [], [], {}, mapped=lost)
    gone = sorted(k for k in held if k in at_s["customers"])[:3]
    for spec in (customers, order_lines):
        rows = [v for k, v in at_s[spec.name].items() if spec is not customers or k not in gone]
        landing_writer.write_snapshot(pipeline.landing, "s1", spec, rows, snapshot_lsn)
    pipeline.run()
    current = {(r["customer_id"],): r for r in pipeline.table("customers_current", "customer_id")}
    last = {}
    for r in pipeline.table("customers_history", "customer_id, valid_from_lsn"):
        last[(r["customer_id"],)] = r
    for key in gone:
        for row in (current[key], last[key]):
            assert row["is_deleted"] and row["operation"] == "delete", row
            assert {c.name: row[c.name] for c in customers.columns} == held[key], row
        assert current[key]["commit_lsn"] == last[key]["valid_from_lsn"] == lsn_hex(snapshot_lsn)


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


def _mart_files(pipeline, model: str) -> int:
    return pipeline.rows(f"describe detail {{s}}.{model}")[0]["numFiles"]


@pytest.mark.scenario
def test_a_small_batch_merges_with_deletion_vectors_and_removes_no_data_file(pipeline):
    """A mart of many files takes a batch touching a few keys as one MERGE that marks the
    changed rows in deletion vectors and adds files for the new rows only."""
    sim = Simulator(TABLES, seed=71)
    _land(pipeline, sim, sim.run(80), "b1", first=True)
    pipeline.run()
    marts = [f"{t.name}_{m}" for t in TABLES for m in ("current", "history")]
    for model in marts:  # the same rows, spread over many files (one commit each)
        table = f"{pipeline.schema}.{model}"
        pipeline.spark.table(table).repartition(12).write.format("delta").mode("overwrite").saveAsTable(table)
    before = {m: _mart_files(pipeline, m) for m in marts}
    assert all(n == 12 for n in before.values()), before
    batch = [sim.transaction(statements=1, kinds=kinds) for kinds in (("update",), ("update",), ("delete",))]
    _land(pipeline, sim, batch, "b2")
    pipeline.run()
    check_marts(pipeline, sim, sim.transactions[-1].commit_lsn)
    for model in marts:
        properties = {r["key"]: r["value"] for r in pipeline.rows(f"show tblproperties {{s}}.{model}")}
        assert properties.get("delta.enableDeletionVectors") == "true", model
        last = pipeline.rows(f"describe history {{s}}.{model} limit 1")[0]
        metrics = last["operationMetrics"]
        assert last["operation"] == "MERGE", (model, last["operation"])
        assert int(metrics["numTargetDeletionVectorsAdded"]) > 0, (model, metrics)
        assert int(metrics["numTargetFilesRemoved"]) == 0, (model, metrics)
        assert int(metrics["numTargetFilesAdded"]) <= 4, (model, metrics)
        assert int(metrics["numTargetRowsCopied"]) == 0, (model, metrics)


def test_marts_and_staging_keep_their_materializations_and_refuse_buckets(tmp_path):
    """The marts and typed staging build with the package's materializations (one statement each)
    whatever the project configures for their folders; a `buckets` declaration is refused."""
    import yaml
    from dbt.cli.main import dbtRunner

    from tests.conftest import EVENT_TABLES, PROJECT_DIR, compile_sql, copy_project

    project = copy_project(tmp_path / "project", {}, drop=EVENT_TABLES)
    config = yaml.safe_load((project / "dbt_project.yml").read_text())
    config["models"]["sqlserver_cdc"]["marts"].update({"+materialized": "incremental", "+file_format": "parquet",
                                                      "+incremental_strategy": "insert_overwrite"})
    config["models"]["sqlserver_cdc"]["staging"] = {"+materialized": "view"}
    (project / "dbt_project.yml").write_text(yaml.safe_dump(config, sort_keys=False))
    parsed = dbtRunner().invoke(["--quiet", "--log-level", "none", "parse", "--project-dir", str(project),
                                 "--profiles-dir", str(PROJECT_DIR)])
    assert parsed.success, parsed.exception
    nodes = {n.name: n.config.materialized for n in parsed.result.nodes.values() if n.resource_type == "model"}
    assert nodes["customers_current"] == nodes["customers_history"] == "cdc_mart"
    assert nodes["stg_change_tables__customers"] == nodes["stg_cdc_metadata__lsn_time_mapping"] == "cdc_staging"
    merge = compile_sql("{{ sqlserver_cdc.mart_merge_sql('t', 's', 'customers', 'current_state') }}")
    assert "when matched and src.operation is null then delete" in merge and "commit_lsn >= dest.commit_lsn" in merge
    tables = yaml.safe_load((PROJECT_DIR / "dbt_project.yml").read_text())["vars"]["cdc_tracked_tables"]
    tables["customers"]["buckets"] = 8
    with pytest.raises(AssertionError, match="'buckets' is no longer used"):
        compile_sql("{{ sqlserver_cdc.tracked_table('customers') }}", vars={"cdc_tracked_tables": tables})
