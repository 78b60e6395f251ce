"""End-to-end: simulated SQL Server history -> landing files -> runner -> marts, compared with
the expected marts computed in Python."""

from __future__ import annotations

import io
import math
from datetime import datetime, timedelta, timezone

import pytest

from cdc_simulator import landing_writer
from cdc_simulator.simulate import Simulator, lsn_hex
from runner.run import cli, report
from tests.conftest import compile_sql, last_execution, table_scans
from tests.expected import check_marts, current_state
from tests.scenarios import CHANGE_TABLES as TABLES
from tests.scenarios import FORMATS, NAMES
from tests.scenarios import land_changes as _land


def test_malformed_rows_are_quarantined_and_good_rows_flow(pipeline):
    sim = Simulator(TABLES, seed=3)
    txs = sim.run(30)
    _land(pipeline, sim, txs, "b1", first=True)
    folder = pipeline.landing / "change_tables" / "sales_order_lines"
    lsn = "0x" + lsn_hex(txs[-1].commit_lsn)
    header = "__$start_lsn,__$end_lsn,__$seqval,__$operation,__$update_mask,order_id,line_no,product_code,quantity,unit_price,notes,modified_at,__$command_id\n"
    (folder / "bad.csv").write_text(
        header
        + "0xNOTANLSN,,0x0000002C000003000001,2,0x7F,90001,1,ABC,1,1.00,x,2026-11-01 08:00:00,1\n"
        + f"{lsn},,0x0000002C000003000001,9,0x7F,90002,1,ABC,1,1.00,x,2026-11-01 08:00:00,1\n"
        + f"{lsn},,0x0000002C000003000001,2,0x7F,90003,1,ABC,many,1.00,x,2026-11-01 08:00:00,1\n"
    )
    summary = pipeline.run()
    by_table = {r["tracked_table"]: r for r in summary}
    assert by_table["order_lines"]["quarantined"] == 3
    reasons = pipeline.rows("select quarantine_reason, _source_file from {s}.cdc_quarantine order by quarantine_reason")
    assert [r["quarantine_reason"] for r in reasons] == [
        'column quantity: value "many" is not a valid int',
        "invalid LSN in __$start_lsn: 0xNOTANLSN",
        "unknown __$operation: 9",
    ]
    assert {r["_source_file"] for r in reasons} == {"change_tables/sales_order_lines/bad.csv"}
    check_marts(pipeline, sim, txs[-1].commit_lsn)
    # with more declared tables than one view's text holds on the embedded metastore (Derby keeps at
    # most 32,700 characters), the view reads part views of its branches: the same rows; back under
    # the limit, the parts go (macros/audit/quarantine.sql)
    from runner.run.dbt import Dbt

    parts = f"show views in {pipeline.schema} like 'cdc_quarantine__part*'"
    for chars, many in ((400, True), (30000, False)):
        split = int(compile_sql("{{ sqlserver_cdc._quarantine_parts(sqlserver_cdc._quarantine_branches()) | length }}",
                                {"cdc_quarantine_view_chars": chars}, pipeline.project_dir).strip())
        assert (split > 2) == many and (split == 1) != many
        dbt = Dbt(pipeline.project_dir, "local", {"cdc_raw_schema": pipeline.target.raw_schema,
                                                  "cdc_quarantine_view_chars": chars})
        assert [n.status for n in dbt.build(["cdc_quarantine"], False) if n.name == "cdc_quarantine"] == ["success"]
        assert len(pipeline.rows(parts)) == (split if many else 0)
        assert pipeline.rows("select quarantine_reason, _source_file from {s}.cdc_quarantine "
                             "order by quarantine_reason") == reasons


@pytest.mark.scenario
def test_lsn_time_mapping_as_of_and_window_validation_macros(pipeline, render):
    sim = Simulator(TABLES, seed=31)
    txs = sim.run(40)
    _land(pipeline, sim, txs, "b1", first=True)
    pipeline.run()
    # as_of: the state at an LSN or a time, from history
    spec = next(t for t in TABLES if t.name == "order_lines")
    for tx in (txs[5], txs[22], txs[-1]):
        expected = current_state(spec, sim.transactions, tx.commit_lsn)
        by_lsn = render(f"select * from {{{{ sqlserver_cdc.as_of('order_lines', lsn=\"'{lsn_hex(tx.commit_lsn)}'\") }}}}")
        at = f"timestamp'{tx.end_time.isoformat(sep=' ')}'"
        by_time = render(f"select * from {{{{ sqlserver_cdc.as_of('order_lines', at=\"{at}\") }}}}")
        for got in (by_lsn, by_time):
            assert {(r["order_id"], r["line_no"]): r["quantity"] for r in got} == \
                {k: v["quantity"] for k, v in expected.items()}
    # the LSN <-> time mapping functions
    t = txs[10]
    at = f"timestamp'{t.end_time.isoformat(sep=' ')}'"
    rows = render(
        "select {{ sqlserver_cdc.max_lsn() }} as max_lsn, {{ sqlserver_cdc.min_lsn('DBO_Customers') }} as min_lsn,"
        f" {{{{ sqlserver_cdc.map_lsn_to_time(\"'{lsn_hex(t.commit_lsn)}'\") }}}} as commit_time,"
        + ", ".join(
            f"{{{{ sqlserver_cdc.map_time_to_lsn('{relation}', \"{at}\") }}}} as r{i}"
            for i, relation in enumerate(["largest less than", "largest less than or equal",
                                          "smallest greater than", "smallest greater than or equal"])
        )
    )
    assert rows == [{
        "max_lsn": lsn_hex(txs[-1].commit_lsn),
        "min_lsn": lsn_hex(txs[0].begin_lsn),
        "commit_time": t.end_time,
        "r0": lsn_hex(txs[9].commit_lsn),
        "r1": lsn_hex(t.commit_lsn),
        "r2": lsn_hex(txs[11].commit_lsn),
        "r3": lsn_hex(t.commit_lsn),
    }]
    query = (
        "select count(*) as n from {{ sqlserver_cdc.net_changes(ref('stg_change_tables__customers'), ['customer_id'],"
        " ['customer_id'], 'all', \"'%s'\", \"'%s'\", 'dbo_customers') }}"
    )
    inside = render(query % (lsn_hex(txs[0].begin_lsn), lsn_hex(txs[-1].commit_lsn)))
    assert inside[0]["n"] > 0
    with pytest.raises(Exception, match="outside the validity interval of capture instance dbo_customers") as error:
        render(query % ("0000002C000000000000", lsn_hex(txs[-1].commit_lsn)))
    assert f"[{lsn_hex(txs[0].begin_lsn)}, {lsn_hex(txs[-1].commit_lsn)}]" in str(error.value)
    with pytest.raises(Exception, match="not captured yet"):
        render(query % (lsn_hex(txs[0].begin_lsn), "FFFF0000000000000000"))

    # retention headroom (docs/operations.md "Retention headroom"): with the marts held below newly
    # landed transactions, each change-table table has the first pending commit time plus the
    # cleanup retention of the landed cdc_jobs export, less now; under --min-headroom it warns,
    # and with --strict the run fails
    pending = sim.run(10)
    _land(pipeline, sim, pending, "b2")
    jobs = pipeline.landing / "cdc_metadata" / "cdc_jobs"
    jobs.mkdir(parents=True)
    (jobs / "jobs.csv").write_text("database_id,job_type,retention\n5,capture,0\n5,cleanup,144000\n")
    held = "0x" + lsn_hex(txs[-1].commit_lsn)
    # an --upper-lsn that is not an LSN is refused before anything lands
    with pytest.raises(cli.UsageError, match="--upper-lsn 0x12:34 is not an LSN; give e.g. 0x0000002C00000300017C"):
        pipeline.run(upper_lsn="0x12:34")
    summary = pipeline.run(upper_lsn=held)
    expected = pending[0].end_time.replace(tzinfo=timezone.utc).timestamp() + 144000 * 60 - datetime.now(timezone.utc).timestamp()
    by_table = {r["tracked_table"]: r for r in summary}
    assert abs(by_table["customers"]["headroom_seconds"] - expected) < 600
    assert by_table["order_lines"]["headroom_seconds"] == by_table["customers"]["headroom_seconds"]
    # the lag, from the same query: the capture high-water mark's commit time (the last landed
    # transaction) less that of the LSN the marts reached (whole seconds, as unix_timestamp)
    def seconds(tx) -> int:
        return math.floor(tx.end_time.replace(tzinfo=timezone.utc).timestamp())
    assert by_table["customers"]["lag_seconds"] == by_table["order_lines"]["lag_seconds"] == seconds(pending[-1]) - seconds(txs[-1]) > 0
    ledger = pipeline.rows("select retention_minutes, headroom_seconds from {s}.cdc_runs order by run_id desc limit 1")[0]
    assert ledger["retention_minutes"] == 144000 and set(ledger["headroom_seconds"]) == {"customers", "order_lines"}
    output = io.StringIO()
    with pytest.raises(cli.PipelineFailed, match="2 table\\(s\\) under the retention headroom and --strict is set"):
        pipeline.run(upper_lsn=held, min_headroom=24 * 365, strict=True, progress=report.Progress(stream=output))
    assert "WARNING customers: SQL Server's cleanup (retention 144000 minutes, from cdc_jobs) reaches its first " \
        "change not applied yet in " in output.getvalue()
    # caught up: nothing landed is pending, so no headroom and no warning
    summary = pipeline.run(min_headroom=24 * 365, strict=True)
    by_table = {r["tracked_table"]: r for r in summary}
    assert by_table["customers"]["headroom_seconds"] is None and by_table["order_lines"]["headroom_seconds"] is None
    assert by_table["customers"]["lag_seconds"] == by_table["order_lines"]["lag_seconds"] == 0


@pytest.mark.scenario
def test_changes_landed_twice_apply_once_and_a_corrected_reexport_applies_its_missed_row(pipeline):
    """The same change rows landed again (an export copied under another name, in a later run or
    twice in one run): each is applied once, every other copy is quarantined naming the file of
    the copy that was applied, and the run succeeds and says so. A copy whose rows are bad for
    another reason keeps that reason. A corrected re-export of a range the marts moved past
    applies the row the first export missed (the table's marts are rebuilt from staging)."""
    import csv
    import shutil

    sim = Simulator(TABLES, seed=13)
    _land(pipeline, sim, sim.run(30), "b1", first=True)
    pipeline.run()
    # in a later run, two copies: one of order_lines' export whose every row is bad (quantity not
    # a number), quarantined for that reason, not as duplicates of the trusted originals; and
    # customers' export landed again under another name
    source = pipeline.landing / "change_tables/sales_order_lines/b1.csv"
    with source.open(newline="") as f:
        rows = list(csv.DictReader(f))
    with (source.parent / "b1-bad-copy.csv").open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows({**r, "quantity": "many"} for r in rows)
    folder = pipeline.landing / "change_tables/dbo_customers"
    shutil.copy(folder / "b1.parquet", folder / "b1-again.parquet")
    customers = pipeline.rows("select count(*) as n from {s}.stg_change_tables__customers")[0]["n"]
    summary = pipeline.run()
    assert {r["tracked_table"]: r["quarantined"] for r in summary} == {"order_lines": len(rows), "customers": customers}
    bad = pipeline.rows("select distinct quarantine_reason from {s}.stg_change_tables__order_lines "
                        "where _source_file like '%b1-bad-copy.csv'")
    assert len(bad) == 1 and "duplicate" not in bad[0]["quarantine_reason"], bad
    reasons = pipeline.rows("select distinct quarantine_reason from {s}.stg_change_tables__customers "
                            "where _source_file like '%b1-again.parquet'")
    assert reasons == [{"quarantine_reason": "duplicate of the change row landed from change_tables/dbo_customers/b1.parquet"}]
    check_marts(pipeline, sim, sim.transactions[-1].commit_lsn)
    # a new export landed twice in one run: applied once, the other copy quarantined
    txs = sim.run(20)
    _land(pipeline, sim, txs, "b2")
    shutil.copy(folder / "b2.parquet", folder / "b2-copy.parquet")
    new = sum(len(tx.changes.get("customers", [])) for tx in txs)
    summary = pipeline.run()
    assert {r["tracked_table"]: r["quarantined"] for r in summary}["customers"] == new
    check_marts(pipeline, sim, txs[-1].commit_lsn)
    quarantined = pipeline.rows("select _source_file, quarantine_reason from {s}.stg_change_tables__customers "
                                "where quarantine_reason like 'duplicate%' and _source_file like '%b2%'")
    files = {r["_source_file"] for r in quarantined}
    assert len(files) == 1 and len(quarantined) == new
    (applied,) = {"change_tables/dbo_customers/b2.parquet", "change_tables/dbo_customers/b2-copy.parquet"} - files
    assert {r["quarantine_reason"] for r in quarantined} == {f"duplicate of the change row landed from {applied}"}
    # a corrected re-export: the first export of a range missed a change row, and the marts moved
    # past it; the re-export lands the row below their watermark, which rebuilds that table's marts
    txs = sim.run(20)
    _land(pipeline, sim, txs, "b3")
    export = pipeline.landing / "change_tables/sales_order_lines/b3.csv"
    whole = export.read_text()
    lines = whole.splitlines(keepends=True)
    assert len(lines) > 3
    export.write_text("".join(lines[:-1]))
    pipeline.run()
    (export.parent / "b3-corrected.csv").write_text(whole)
    output = io.StringIO()
    summary = pipeline.run(progress=report.Progress(stream=output))
    assert "order_lines: changes or their commit times landed at or below its marts' watermark" in output.getvalue()
    assert {r["tracked_table"]: r["quarantined"] for r in summary}["order_lines"] == len(lines) - 2
    check_marts(pipeline, sim, txs[-1].commit_lsn)
    # a change applied while its lsn_time_mapping row was missing (the mapping's export skipped it)
    # has no commit time; when the row lands, its table's marts are rebuilt and get it. A mapping
    # re-export of rows already landed rebuilds nothing
    txs = sim.run(20)
    hole = next(tx for tx in txs[:-1] if tx.changes.get("customers"))
    landing_writer.write_batch(pipeline.landing, "b4", TABLES, txs, FORMATS,
                               mapped=[tx for tx in txs if tx is not hole])
    pipeline.run()
    untimed = "select count(*) as n from {s}.customers_history where valid_from is null or (valid_to is null and not is_current)"
    assert pipeline.rows(untimed)[0]["n"] > 0
    landing_writer.write_batch(pipeline.landing, "b4-late", TABLES, [], FORMATS, mapped=[hole])
    output = io.StringIO()
    pipeline.run(progress=report.Progress(stream=output))
    assert "customers: changes or their commit times landed at or below its marts' watermark (from LSN 0x" \
        + lsn_hex(hole.commit_lsn) in output.getvalue()
    assert pipeline.rows(untimed)[0]["n"] == 0
    assert pipeline.rows("select count(*) as n from {s}.customers_current where commit_time is null")[0]["n"] == 0
    check_marts(pipeline, sim, txs[-1].commit_lsn)
    landing_writer.write_batch(pipeline.landing, "b4-again", TABLES, [], FORMATS, mapped=txs)
    output = io.StringIO()
    pipeline.run(progress=report.Progress(stream=output))
    assert "commit times landed" not in output.getvalue() and "0 table(s) with changes" in output.getvalue()


@pytest.mark.scenario
def test_batches_build_marts_reading_only_their_batch_a_rerun_changes_nothing_a_full_refresh_equals_them(pipeline, monkeypatch):
    """Three batches, a run after each (the last with the runner's clock an hour behind): the marts
    equal the source at the run's bound, each run applies its batch's changes; staging decodes each landed row once, every scan of the staged
    table during a later run reads only that run's batch (Spark's metrics), and the run ledger
    holds one succeeded row per run with what it landed and applied. A run over the same files
    then lands and changes nothing; a full refresh (all tables, then one table's staging and
    marts) rebuilds the same marts; the audit passes, then catches what no batch check would."""
    sim = Simulator(TABLES, seed=29)
    spark = pipeline.spark
    staged = f"{pipeline.schema}.stg_change_tables__customers"
    for i, size in enumerate((120, 40, 40)):
        txs = sim.run(size)
        _land(pipeline, sim, txs, f"b{i}", first=i == 0)
        before = last_execution(spark)
        output = io.StringIO()
        if i == 2:  # a VM restored from a snapshot: batch ids from the clock would sort before the last run's
            behind = (datetime.now(timezone.utc) - timedelta(hours=1)).strftime("%Y%m%dT%H%M%S%fZ") + "-behind"
            monkeypatch.setattr(cli, "_batch_id", lambda behind=behind: behind)
            previous_run = pipeline.rows("select max(run_id) as r from {s}.cdc_runs")[0]["r"]
        summary = pipeline.run(progress=report.Progress(stream=output))
        if i == 2:
            monkeypatch.undo()
            assert "this machine's clock is behind the last landed batch or recorded run" in output.getvalue()
        # exports without manifests follow the lsn_time_mapping alone, and the run says so
        assert ("WARNING capture instance(s) dbo_customers, sales_order_lines land without export manifests"
                in output.getvalue())
        check_marts(pipeline, sim, txs[-1].commit_lsn)
        assert {r["lsn_reached"] for r in summary if r["tracked_table"] in NAMES} == {lsn_hex(txs[-1].commit_lsn)}
        assert all(r["quarantined"] == 0 for r in summary)
        run = pipeline.rows("select * from {s}.cdc_runs order by run_id desc limit 1")[0]
        if i == 2:
            assert run["run_id"] > previous_run and run["run_id"].endswith("-behind")
        batch_rows = pipeline.rows(f"select count(*) as n from {staged} where _batch_id = '{run['run_id']}'")[0]["n"]
        landed = sum(len(tx.changes.get("customers", [])) for tx in txs)
        assert batch_rows == landed > 0
        # decoded once: the staging commit of this run appended exactly this batch's rows
        write = spark.sql(f"describe history {staged} limit 1").collect()[0]
        assert write["operation"] in ("WRITE", "CREATE TABLE AS SELECT", "CREATE OR REPLACE TABLE AS SELECT")
        assert int(write["operationMetrics"]["numOutputRows"]) == landed
        # ... and its watermark records the batch it took in (the next run starts after it)
        assert pipeline.rows("select watermark_batch from {s}.cdc_watermarks where model_name = "
                             "'stg_change_tables__customers'") == [{"watermark_batch": run["run_id"]}]
        # the ledger: this run, succeeded, with its landed records, window and per-table counts
        assert run["status"] == "succeeded" and run["ended_at"] is not None and run["failed_nodes"] == []
        assert run["landed"]["change_tables/dbo_customers"] == landed
        assert run["upper_lsn"]["change_tables"] == lsn_hex(txs[-1].commit_lsn)
        tables = {t["tracked_table"]: t for t in run["tables"]}
        assert tables["customers"]["rows_landed"] == landed == {r["tracked_table"]: r for r in summary}["customers"]["rows_landed"]
        if i == 0:
            continue
        applied = {r["tracked_table"]: r["changes_applied"] for r in summary}
        for spec in TABLES:
            assert applied[spec.name] == sum(1 for tx in txs for r in tx.changes.get(spec.name, []) if r.operation != 3)
        # every scan of the staged rows in this run (marts, checks, summary) read this batch only
        scans = table_scans(spark, before, "stg_change_tables__customers")
        assert scans and max(s["number of output rows"] for s in scans) > 0, "the run did not read the staged table"
        staged_rows = pipeline.rows(f"select count(*) as n from {staged}")[0]["n"]
        assert staged_rows > landed  # reading every staged row would fail the next line
        assert all(s["number of output rows"] <= landed for s in scans), scans
    runs = pipeline.rows("select status, run_id from {s}.cdc_runs order by run_id")
    assert [r["status"] for r in runs] == ["succeeded"] * 3
    # the seeds loaded once, by the first run, which recorded the checksums of their files
    seeds_sql = ("select model_name, watermark_batch, declaration from {s}.cdc_watermarks "
                 "where model_name in ('cdc_operations', 'sqlserver_types') order by model_name")
    seeds = pipeline.rows(seeds_sql)
    assert [(r["model_name"], r["watermark_batch"]) for r in seeds] == [
        ("cdc_operations", runs[0]["run_id"]), ("sqlserver_types", runs[0]["run_id"])]
    assert all(len(r["declaration"] or "") == 64 for r in seeds)  # dbt's sha256 of the file

    # the same files again: nothing lands, nothing changes
    before = {t.name: pipeline.table(f"{t.name}_history", ", ".join(t.key) + ", valid_from_lsn") for t in TABLES}
    summary = pipeline.run()
    assert all(r["rows_landed"] == 0 and r["changes_applied"] == 0 for r in summary)
    after = {t.name: pipeline.table(f"{t.name}_history", ", ".join(t.key) + ", valid_from_lsn") for t in TABLES}
    assert before == after
    assert pipeline.rows("select count(*) as n from {s}_raw.landed_rows where landing_kind != 'landed_files'")[0]["n"] == sum(
        len(r) for tx in sim.transactions for r in tx.changes.values()) + len(sim.transactions) + 2 + sum(
        len(t.columns) for t in TABLES)
    check_marts(pipeline, sim, sim.transactions[-1].commit_lsn)

    # a full refresh rebuilds the same marts from what is staged: staging, with nothing new, is
    # not written (no Delta commit), every mart is, the current state from the history
    def version(model: str) -> int:
        return pipeline.rows(f"describe history {{s}}.{model}")[0]["version"]

    staging = [f"stg_change_tables__{t.name}" for t in TABLES]
    before_refresh = {m: version(m) for m in staging + [f"{t.name}_history" for t in TABLES]}
    before = last_execution(spark)
    pipeline.run(full_refresh=True)
    # the window's transactions are netted once: the history build reads staging, the current
    # state takes the history's last versions (then the checks and the summary read both)
    staging_reads = {s["execution"] for s in table_scans(spark, before, "stg_change_tables__customers")}
    history_reads = {s["execution"] for s in table_scans(spark, before, "customers_history")}
    assert len(staging_reads) == 3 and len(history_reads - staging_reads) == 1, (staging_reads, history_reads)
    # ... so its checks leave out the two that hold by construction (one current version per key,
    # the current state equal to the history's open versions); the audit below runs them
    checks_sql = next(pipeline.project_dir.glob("target/run/**/*tracked_table_checks_customers_current_customers.sql"))
    assert "history: validity ranges not contiguous" in checks_sql.read_text()
    assert "current versions differ" not in checks_sql.read_text()
    assert {m: version(m) for m in staging} == {m: before_refresh[m] for m in staging}
    assert all(version(f"{t.name}_history") == before_refresh[f"{t.name}_history"] + 1 for t in TABLES)
    refreshed = {t.name: pipeline.table(f"{t.name}_history", ", ".join(t.key) + ", valid_from_lsn") for t in TABLES}
    assert refreshed == after
    assert pipeline.rows(seeds_sql) == seeds  # unchanged seeds are not reloaded
    check_marts(pipeline, sim, sim.transactions[-1].commit_lsn)
    # the runbook's rebuild of one table from its landed changes: its staging (restaged) and both marts
    restaged = {m: version(m) for m in staging}
    pipeline.run(restage=True, select=["stg_change_tables__customers+"])
    assert {m: version(m) - restaged[m] for m in staging} == {m: int(m.endswith("customers")) for m in staging}
    assert pipeline.table("customers_history", "customer_id, valid_from_lsn") == refreshed["customers"]
    check_marts(pipeline, sim, sim.transactions[-1].commit_lsn)
    # the audit runs every data test on whole tables: it passes, then catches a second current
    # version of a key that no batch-scoped check of a later run would look at
    from runner.run.cli import main

    project = ["--project-dir", str(pipeline.project_dir)]
    assert main(["audit", *project]) == 0
    assert "current versions differ" in checks_sql.read_text()
    pipeline.spark.sql(f"insert into {pipeline.schema}.customers_history "
                       f"select * from {pipeline.schema}.customers_history where is_current limit 1")
    assert main(["audit", *project, "--select", "customers_history"]) == 1


@pytest.mark.scenario
def test_a_run_builds_only_the_tables_with_changes_and_each_costs_a_fixed_few_statements(spark, tmp_path):
    """Four declared tables (the benchmark's), a first run, then a batch on two of them: dbt's
    run results hold no node of the two others, each changed table issued four statements (its
    staging INSERT, two MERGEs, its check, which reads staging only), no scan of an unchanged
    table's staging or marts ran (Spark's metrics), their watermarks moved to the new bound, and
    the marts equal the plain PySpark reference."""
    import os
    import uuid

    from cdc_tooling.bench import (
        BenchConfig,
        bench_project,
        check_reference,
        declarations,
        run_parts,
        write_reference,
        write_workload,
    )
    from runner.run.cli import run_pipeline
    from runner.spark.profile import load_target
    from tests.conftest import PROJECT_DIR

    # four tables prove what twelve did (the benchmark measures the cost with 12 and 50): two
    # changed, two not
    cfg = BenchConfig(tables=4, columns=3, width=12, rows_per_transaction=1, seed=5)
    tables = declarations(cfg)
    project = bench_project(PROJECT_DIR, tmp_path / "project", tables)
    landing = tmp_path / "landing"
    schema = "m_" + uuid.uuid4().hex[:8]
    os.environ["SQLSERVER_CDC_SCHEMA"] = schema
    target = load_target(project, "local")
    write_workload(spark, landing, tables, 0, 40, 10, cfg, "initial")
    first: list = []
    timings: dict = {}
    run_pipeline(project, target, landing, progress=report.Progress(stream=io.StringIO()), nodes=first, timings=timings)
    assert {n.name for n in first if n.resource_type == "model"} >= {f"bench_t{i}_current" for i in range(1, 5)}
    # where an initial load's time went (the benchmark's parts of a phase)
    parts = run_parts(first, timings)
    assert all(parts[p] > 0 for p in ("landing", "build", "record", "build: staging (node seconds)",
                                     "build: marts (node seconds)", "build: checks (node seconds)")), parts

    changed = dict(list(tables.items())[:2])
    write_workload(spark, landing, changed, 40, 50, 10, cfg, "batch")
    before = last_execution(spark)
    nodes: list = []
    output = io.StringIO()
    os.environ["SQLSERVER_CDC_SCHEMA"] = schema
    summary = run_pipeline(project, target, landing, progress=report.Progress(stream=output), nodes=nodes)
    assert "2 table(s) with changes in their window (bench_t1, bench_t2); 2 without" in output.getvalue()
    ran = {n.name: n for n in nodes}
    models = sorted(n.name for n in nodes if n.resource_type == "model")
    assert models == ["bench_t1_current", "bench_t1_history", "bench_t2_current", "bench_t2_history",
                      "stg_cdc_metadata__lsn_time_mapping", "stg_change_tables__bench_t1", "stg_change_tables__bench_t2"]
    tests = [n for n in nodes if n.resource_type == "test"]
    assert sorted(n.name for n in tests if "tracked_table_checks" in n.name) == [
        "sqlserver_cdc_tracked_table_checks_bench_t1_current_bench_t1",
        "sqlserver_cdc_tracked_table_checks_bench_t2_current_bench_t2"]
    for name in ("bench_t1", "bench_t2"):
        for model in (f"stg_change_tables__{name}", f"{name}_history", f"{name}_current",
                      f"sqlserver_cdc_tracked_table_checks_{name}_current_{name}"):
            assert len(ran[model].statements) == 1, (model, ran[model].statements)
    assert all(n.status in ("success", "pass") for n in nodes), nodes
    # the batch check reads staging only: the marts' checks run inside their MERGEs (_mart_guard)
    checks_sql = next(project.glob("target/run/**/*tracked_table_checks_bench_t1_current_bench_t1.sql")).read_text()
    assert f"{schema}.stg_change_tables__bench_t1" in checks_sql
    assert f"{schema}.bench_t1_current" not in checks_sql and f"{schema}.bench_t1_history" not in checks_sql
    # nothing of an unchanged table was read
    for i in range(3, 5):
        for relation in (f"stg_change_tables__bench_t{i}", f"bench_t{i}_current", f"bench_t{i}_history"):
            assert table_scans(spark, before, relation) == [], relation
    by_table = {r["tracked_table"]: r for r in summary}
    assert by_table["bench_t1"]["changes_applied"] == 10 and by_table["bench_t3"]["changes_applied"] == 0
    upper = _rows(spark, f"select upper_lsn['change_tables'] as u from {schema}.cdc_runs order by run_id desc limit 1")
    marks = _rows(spark, f"select model_name, watermark_lsn from {schema}.cdc_watermarks where model_name like 'bench_t%'")
    assert len(marks) == 8 and {m["watermark_lsn"] for m in marks} == {upper[0]["u"]}
    assert {r["lsn_reached"] for r in summary} == {upper[0]["u"]} and all(r["advanced"] for r in summary)
    write_reference(spark, landing, tables, tmp_path / "reference")
    assert check_reference(spark, schema, tmp_path / "reference", tables, report.Progress(stream=io.StringIO()))["equal"]


def _rows(spark, sql: str) -> list[dict]:
    return [r.asDict() for r in spark.sql(sql).collect()]
