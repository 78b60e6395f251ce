"""Change Event Streaming channel: the published examples stage to typed rows; a DML history
rendered as CES events (shuffled over batches, delivered twice, split into segments that land
in later batches, in every published variant) builds the same marts as the same history through
change tables; bad lines, unknown operations, uncastable values and orphan segments are
quarantined while good events still flow."""

from __future__ import annotations

import copy
import json
import random
import uuid
from datetime import datetime

import pytest
import yaml

from cdc_simulator import ces_writer, landing_writer
from cdc_simulator.simulate import Column, Simulator, TableSpec, lsn_hex
from tests.conftest import (
    FIXTURES,
    PROJECT_DIR,
    Pipeline,
    assert_raw_read_by_batch,
    copy_project,
    last_execution,
    same_rows,
)

SAMPLES = FIXTURES / "reference" / "ces"
DECLARED = yaml.safe_load((PROJECT_DIR / "dbt_project.yml").read_text())["vars"]["cdc_tracked_tables"]


def _pipeline(spark, tmp_path, tables: dict, replace=False, orphan_after=None, drop=()) -> Pipeline:
    project = copy_project(tmp_path / "project", tables, replace=replace, drop=drop)
    if orphan_after is not None:
        config = yaml.safe_load((project / "dbt_project.yml").read_text())
        config["vars"]["cdc_ces_orphan_after_batches"] = orphan_after
        (project / "dbt_project.yml").write_text(yaml.safe_dump(config, sort_keys=False))
    (tmp_path / "landing").mkdir()
    return Pipeline(spark, "t_" + uuid.uuid4().hex[:8], tmp_path / "landing", project_dir=project)


def _one_line(path) -> str:
    return json.dumps(json.loads(path.read_text()), ensure_ascii=False)


def test_published_examples_stage_to_typed_rows(spark, tmp_path):
    pipeline = _pipeline(spark, tmp_path, {
        "purchases": {"channel": "ces", "source_database": "db1", "source_schema": "dbo", "source_table": "Purchases",
                      "key": ["purchase_id"], "columns": [
                          {"name": "purchase_id", "type": "int", "ordinal": 1},
                          {"name": "customer_name", "type": "varchar(100)", "ordinal": 2},
                          {"name": "product_id", "type": "int", "ordinal": 3},
                          {"name": "product_name", "type": "varchar(100)", "ordinal": 4},
                          {"name": "price_per_item", "type": "int", "ordinal": 5},
                          {"name": "quantity", "type": "int", "ordinal": 6},
                          {"name": "purchase_date", "type": "datetime", "ordinal": 7},
                          {"name": "payment_method", "type": "varchar(50)", "ordinal": 8}]},
        # the third-party example shows two of the table's columns (indexes 0 and 5)
        "product": {"channel": "ces", "source_schema": "dbo", "source_table": "product", "key": ["ProductId"],
                    "columns": [{"name": "ProductId", "type": "int", "ordinal": 1},
                                {"name": "ItemsInStock", "type": "smallint", "ordinal": 6}]},
    }, drop=tuple(name for name, t in DECLARED.items() if t.get("channel") != "ces"))  # the CES demo table stays
    folder = pipeline.landing / "ces" / "hub"
    folder.mkdir(parents=True)
    samples = sorted(SAMPLES.glob("*.json"))
    assert len(samples) == 7
    # one line per event, in a shuffled order, as a consumer of several partitions writes them
    lines = [_one_line(p) for p in samples]
    random.Random(3).shuffle(lines)
    (folder / "samples.jsonl").write_text("\n".join(lines) + "\n")
    summary = pipeline.run()
    assert all(r["quarantined"] == 0 for r in summary)
    assert pipeline.rows("select count(*) as n from {s}.cdc_quarantine")[0]["n"] == 0

    purchases = pipeline.table("stg_ces__purchases", "commit_lsn")
    common = {"purchase_id": 105, "customer_name": "Anna Doe", "purchase_date": datetime(2025, 3, 14, 16, 45, 1),
              "payment_method": "Credit Card"}
    assert [{k: r[k] for k in ("commit_lsn", "change_lsn", "operation", "commit_time", *common, "product_id",
                               "product_name", "price_per_item", "quantity")} for r in purchases] == [
        {"commit_lsn": "0000002C00000300017C", "change_lsn": "00000000000000000001", "operation": "insert",
         "commit_time": datetime(2025, 3, 14, 16, 45, 20, 650000), **common,
         "product_id": 101, "product_name": "Game 2077", "price_per_item": 60, "quantity": 1},
        {"commit_lsn": "0000002C000003500004", "change_lsn": "00000000000000000001", "operation": "update_after",
         "commit_time": datetime(2025, 3, 14, 16, 49, 59, 567000), **common,
         "product_id": 100, "product_name": "Game 2066", "price_per_item": 50, "quantity": 2},
        {"commit_lsn": "0000002C000003600019", "change_lsn": "00000000000000000001", "operation": "delete",
         "commit_time": datetime(2025, 3, 14, 16, 51, 39, 613000), **common,
         "product_id": 100, "product_name": "Game 2066", "price_per_item": 50, "quantity": 2},
    ]
    # the early examples send no old values: the update carries every column
    assert purchases[1]["update_mask"] == bytes([0xFE])

    employees = pipeline.table("stg_ces__employees", "commit_lsn")
    signup = datetime(2026, 8, 7, 16, 25, 0, 883333)  # datetime2(7) .8833333, to Spark's microseconds
    assert [(r["commit_lsn"], r["operation"], r["Id"], r["FirstName"], r["LastName"], r["SignupDate"], r["commit_time"])
            for r in employees] == [
        ("000000B1000008A80007", "insert", 8, "Nikola", "Nikolic", signup, datetime(2026, 8, 7, 16, 25, 0, 890000)),
        ("000000B1000009300009", "update_after", 8, "Nikola", "Nikolic-Smith", signup,
         datetime(2026, 8, 7, 16, 30, 10, 123000)),
        ("000000B1000009700008", "delete", 8, "Nikola", "Nikolic-Smith", signup, datetime(2026, 8, 7, 16, 35, 42, 450000)),
    ]
    # old values sent: only LastName (ordinal 3) changed
    assert employees[1]["update_mask"] == bytes([0x04])

    product = pipeline.table("stg_ces__product", "commit_lsn")
    assert [(r["commit_lsn"], r["change_lsn"], r["operation"], r["ProductId"], r["ItemsInStock"]) for r in product] == [
        ("0000002C000007300011", "00000000000000000002", "insert", 2, 7)]  # 1-based segmentindex, unsplit

    # the marts: purchase 105 and employee 8 were deleted; their history stays
    assert pipeline.rows("select count(*) as n from {s}.purchases_current")[0]["n"] == 0
    assert pipeline.rows("select count(*) as n from {s}.employees_current")[0]["n"] == 0
    history = pipeline.table("employees_history", "valid_from_lsn")
    assert [(r["valid_from_lsn"], r["valid_to_lsn"], r["LastName"], r["operation"], r["changed_columns"])
            for r in history] == [
        ("000000B1000008A80007", "000000B1000009300009", "Nikolic", "insert", ["Id", "FirstName", "LastName", "SignupDate"]),
        ("000000B1000009300009", "000000B1000009700008", "Nikolic-Smith", "update", ["LastName"]),
    ]
    assert pipeline.table("product_current", "ProductId")[0]["ItemsInStock"] == 7


STAFF_COLUMNS = (Column("staff_id", "int", 1), Column("full_name", "nvarchar(60)", 2), Column("grade", "smallint", 3),
                 Column("salary", "decimal(12,2)", 4), Column("hired", "datetime2(3)", 5),
                 Column("notes", "nvarchar(400)", 6))
STAFF = TableSpec("staff", "dbo_staff", ("staff_id",), STAFF_COLUMNS)
STAFF_CES = TableSpec("staff", None, ("staff_id",), STAFF_COLUMNS, "ces", ("HR", "dbo", "Staff"))


def _declaration(**channel) -> dict:
    return {**channel, "key": ["staff_id"],
            "columns": [{"name": c.name, "type": c.type, "ordinal": c.ordinal} for c in STAFF_COLUMNS]}


@pytest.mark.scenario
def test_ces_events_out_of_order_build_the_marts_change_tables_build(spark, tmp_path):
    pipeline = _pipeline(spark, tmp_path, {
        "staff_ct": _declaration(channel="change_tables", capture_instance="dbo_staff", soft_deletes=True),
        "staff_ces": _declaration(channel="ces", source_schema="dbo", source_table="Staff", soft_deletes=True),
    }, replace=True)
    sim = Simulator([STAFF], seed=5)
    txs = sim.run(150)
    assert {r.operation for tx in txs for r in tx.changes.get("staff", [])} == {1, 2, 3, 4}
    # keys inserted and deleted in one transaction, never changed again, never existed: with
    # soft_deletes they have no current row either (CES rebuilds such a key as a removal marker,
    # which a build from scratch drops)
    lives: dict[tuple, list[list[int]]] = {}
    for tx in txs:
        for key, ops in _operations_by_key(tx).items():
            lives.setdefault(key, []).append(ops)
    assert sum(len(life) == 1 and life[0][0] == 2 and life[0][-1] == 1 for life in lives.values()) >= 2
    # the published variants, as a stream reconfigured over time: old values and 0-based segments;
    # partial updates (@include_all_columns = 0) without old values and 1-based segments; the
    # early preview form (splitindex / splittotalcnt, no transaction object)
    variants = [
        ces_writer.CesOptions(old_values=True, segment_size=250),
        ces_writer.CesOptions(old_values=False, partial_updates=True, segment_size=250, segment_base=1),
        ces_writer.CesOptions(old_values=False, partial_updates=True, segment_size=300, early_form=True),
    ]
    events = []
    for i, options in enumerate(variants):
        events += ces_writer.table_events(STAFF_CES, txs[i * 50:(i + 1) * 50], options, seed=i)
    assert sum(1 for e in events if e.get("segmentindex", e.get("splitindex", 0)) > 1) > 20  # many split messages
    rng = random.Random(5)
    events += rng.sample(events, k=len(events) // 10)  # at-least-once delivery
    rng.shuffle(events)  # round-robin partitions: out of LSN order across and within batches
    ces_batches = [events[i::3] for i in range(3)]
    first_batch_lsns = {e["logicalid"] for e in ces_batches[0]}
    assert {e["logicalid"] for e in ces_batches[1]} & first_batch_lsns  # segments of one message in two batches

    landing_writer.write_captured_columns(pipeline.landing, [STAFF])
    for i in range(3):
        landing_writer.write_batch(pipeline.landing, f"b{i}", [STAFF], txs[i * 50:(i + 1) * 50], {"staff": "csv"},
                                   min_lsn={"dbo_staff": txs[0].begin_lsn} if i == 0 else None)
        ces_writer.write_lines(pipeline.landing / "ces" / "staff_hub" / f"b{i}.jsonl", ces_batches[i])
        pending = pipeline.rows("select count(*) as n from {s}.stg_ces__events where status = 'pending'")[0]["n"] if i else 0
        before = last_execution(spark)
        summary = {r["tracked_table"]: r for r in pipeline.run()}
        if i > 0:
            # incremental staging: the run read only its batch of landed lines; the staged events took
            # in each new line once (and each completed event), and settled only lines that were pending
            run = assert_raw_read_by_batch(pipeline, before)
            merge = spark.sql(f"describe history {pipeline.schema}.stg_ces__events limit 1").collect()[0]
            completed = pipeline.rows("select count(*) as n from {s}.stg_ces__events"
                                      f" where status = 'complete' and _batch_id = '{run['run_id']}'")[0]["n"]
            assert merge["operation"] == "MERGE"
            assert int(merge["operationMetrics"]["numTargetRowsInserted"]) == len(ces_batches[i]) + completed
            assert 0 < int(merge["operationMetrics"]["numTargetRowsUpdated"]) <= pending
        if i == 0:
            watermark = summary["staff_ces"]["lsn_reached"]
            late = [e for e in ces_batches[1] if e["logicalid"].split(":")[1] < watermark]
            assert late  # the next batch brings events below the CES marts' watermark
    assert summary["staff_ces"]["lsn_reached"] == summary["staff_ct"]["lsn_reached"] == lsn_hex(txs[-1].commit_lsn)
    assert pipeline.rows("select count(*) as n from {s}.cdc_quarantine")[0]["n"] == 0
    assert pipeline.rows("select count(*) as n from {s}.stg_ces__events where status = 'pending'")[0]["n"] == 0

    values = [c.name for c in STAFF_COLUMNS]
    current = values + ["commit_lsn", "commit_time", "operation", "is_deleted"]
    history = values + ["valid_from_lsn", "valid_to_lsn", "valid_from", "valid_to", "is_current", "operation",
                        "is_deleted"]
    assert same_rows(pipeline, "staff_ct_current", "staff_ces_current", current) > 30
    assert same_rows(pipeline, "staff_ct_history", "staff_ces_history", history) > 100
    _check_changed_columns(pipeline, lsn_hex(txs[50].begin_lsn))
    # rebuilt from what is staged, then with staging rebuilt from the landed lines: the same marts
    for rebuild in ({"full_refresh": True}, {"restage": True}):
        pipeline.run(**rebuild)
        same_rows(pipeline, "staff_ct_history", "staff_ces_history", history)
        same_rows(pipeline, "staff_ct_current", "staff_ces_current", current)
        _check_changed_columns(pipeline, lsn_hex(txs[50].begin_lsn))


def _operations_by_key(tx) -> dict[tuple, list[int]]:
    """A transaction's operations on staff, per key, in order."""
    ops: dict[tuple, list[int]] = {}
    for r in tx.changes.get("staff", []):
        ops.setdefault(tuple(r.values[k] for k in STAFF.key), []).append(r.operation)
    return ops


def _check_changed_columns(pipeline, partial_from: str) -> None:
    """A partial update carries exactly the SET columns, so changed_columns equal the update mask's.
    With old values and full rows, only the columns whose value differs are known to have
    changed: a SET column given its old value again is not among them."""
    pairs = pipeline.rows(
        "select ct.valid_from_lsn, ct.changed_columns as ct, ces.changed_columns as ces"
        " from {s}.staff_ct_history as ct join {s}.staff_ces_history as ces"
        " on ct.staff_id = ces.staff_id and ct.valid_from_lsn = ces.valid_from_lsn")
    assert len(pairs) > 100
    for p in pairs:
        if p["valid_from_lsn"] >= partial_from:
            assert p["ces"] == p["ct"], p
        else:
            assert set(p["ces"]) <= set(p["ct"]), p
    assert sum(1 for p in pairs if p["valid_from_lsn"] < partial_from and p["ces"] != p["ct"]) < len(pairs) // 20


EMPLOYEES = TableSpec("employees", None, ("Id",), tuple(
    Column(c["name"], c["type"], c["ordinal"]) for c in DECLARED["employees"]["columns"]), "ces",
    ("EmployeesDb", "dbo", "Employees"))


def _variant(event: dict, lsn: int, key: int, operation: str | None = None, **values) -> dict:
    """A copy of an unsplit insert event as another event: new id and LSN, key and values changed."""
    data = json.loads(event["data"])
    data["eventsource"]["transaction"]["commitlsn"] = ":".join(
        (lsn_hex(lsn)[:8], lsn_hex(lsn)[8:16], lsn_hex(lsn)[16:]))
    data["eventsource"]["pkkey"] = [{"columnname": "Id", "value": str(key)}]
    current = {**json.loads(data["eventrow"]["current"]), "Id": str(key), **values}
    data["eventrow"]["current"] = json.dumps(current)
    guid = event["logicalid"].split(":")[0]
    return {**event, "id": str(uuid.uuid4()), "logicalid": f"{guid}:{lsn_hex(lsn)}:{1:020d}",
            "operation": operation or event["operation"], "data": json.dumps(data)}


@pytest.mark.scenario
def test_bad_lines_unknown_operations_uncastable_values_and_orphan_segments_are_quarantined(spark, tmp_path):
    from tests.expected import check_marts
    from tests.expected import history as expected_history

    pipeline = _pipeline(spark, tmp_path, {"employees": DECLARED["employees"]}, replace=True, orphan_after=1)
    sim = Simulator([EMPLOYEES], seed=37)
    txs = sim.run(40)
    events = ces_writer.table_events(EMPLOYEES, txs)
    # one update, split in three segments, whose middle segment arrives a batch later
    late = next(i for i, e in enumerate(events) if e["operation"] == "UPD" and i > len(events) // 2)
    segments = ces_writer.segments(events[late]["data"], events[late]["logicalid"], "UPD",
                                    txs[-1].end_time, ces_writer.CesOptions(segment_size=len(events[late]["data"]) // 3 + 1),
                                    random.Random(1))
    assert len(segments) == 3
    good = events[:late] + events[late + 1:]
    insert = next(e for e in events if e["operation"] == "INS")
    top = txs[-1].commit_lsn
    # a split message whose last segment never comes: waits one landing batch, then is an orphan
    unfinished = _variant(insert, top + 10, 9003)
    orphan = ces_writer.segments(unfinished["data"], unfinished["logicalid"], "INS", txs[-1].end_time,
                                 ces_writer.CesOptions(segment_size=200), random.Random(2))
    bad_lines = [
        "this is not JSON",
        json.dumps({"specversion": "1.0", "type": "com.example.Other", "id": "x1", "source": "/"}),
        json.dumps(_variant(insert, top + 1, 9001, operation="MRG")),
    ]
    bad_values = [
        _variant(insert, top + 2, 9002, SignupDate="not a date"),
        _variant(insert, top + 3, 9004, FirstName="Ana", Id="abc"),
    ]
    folder = pipeline.landing / "ces" / "hub"
    ces_writer.write_lines(folder / "b1.jsonl", good + [segments[0], segments[2]] + bad_values + orphan[:1])
    with (folder / "b1.jsonl").open("a") as f:
        f.write("\n".join(bad_lines) + "\n")
    summary = {r["tracked_table"]: r for r in pipeline.run()}
    assert summary["employees"]["quarantined"] == 2
    reasons = pipeline.rows("select tracked_table, quarantine_reason from {s}.cdc_quarantine order by quarantine_reason")
    assert [(r["tracked_table"], r["quarantine_reason"]) for r in reasons] == [
        ("employees", 'column Id: value "abc" is not a valid int'),
        ("employees", 'column SignupDate: value "not a date" is not a valid datetime2(7)'),
        (None, ("not a CES DML CloudEvent (type com.example.Other); invalid logicalid: missing; "
                "unknown operation: missing; missing data")),
        (None, "not a JSON object"),
        (None, "unknown operation: MRG"),
    ]
    pending = pipeline.rows("select count(distinct logicalid) as n from {s}.stg_ces__events where status = 'pending'")
    assert pending == [{"n": 2}]
    # every good event applied; the incomplete update is not (its transaction shows without it)
    without_late = copy.deepcopy(txs)
    late_lsn = int(events[late]["logicalid"].split(":")[1], 16)
    held = next(tx for tx in without_late if tx.commit_lsn == late_lsn)
    rows = held.changes["employees"]
    sequence = int(events[late]["logicalid"].split(":")[2])  # the event's place among the rows CES sends
    dropped = [r for r in sorted(rows, key=lambda r: (r.seqval, r.operation)) if r.operation != 3][sequence - 1]
    held.changes["employees"] = [r for r in rows if r.seqval != dropped.seqval]
    assert expected_history(EMPLOYEES, without_late) != expected_history(EMPLOYEES, txs)
    check_marts(pipeline, sim, None, tables=[EMPLOYEES], transactions=without_late)

    # batch 2: the missing segment arrives (below the marts' watermark); the orphan's time is up
    ces_writer.write_lines(folder / "b2.jsonl", [segments[1]])
    pipeline.run()
    check_marts(pipeline, sim, None, tables=[EMPLOYEES])
    orphans = pipeline.rows("select quarantine_reason, _batch_id from {s}.cdc_quarantine where quarantine_reason like 'orphan%'")
    assert len(orphans) == 1
    assert orphans[0]["quarantine_reason"].startswith(f"orphan segments: logicalid {orphan[0]['logicalid']} has segment(s) 0 "
                                                     "and no final segment")
    assert pipeline.rows("select count(*) as n from {s}.stg_ces__events where status = 'pending'") == [{"n": 0}]

    # batch 3: the orphan's other segments land after all (it completes and applies, its segments
    # leave the quarantine), with a redelivered event and a redelivered segment (duplicates)
    redelivered = {**good[0], "id": good[0]["id"]}
    ces_writer.write_lines(folder / "b3.jsonl", orphan[1:] + [redelivered, {**segments[1], "id": str(uuid.uuid4())}])
    pipeline.run()
    assert pipeline.rows("select count(*) as n from {s}.cdc_quarantine where quarantine_reason like 'orphan%'") == [{"n": 0}]
    assert pipeline.rows("select count(*) as n from {s}.employees_current where Id = 9003") == [{"n": 1}]
    statuses = pipeline.rows("select status, count(*) as n from {s}.stg_ces__events"
                             " where _batch_id = (select max(_batch_id) from {s}.stg_ces__events) group by status")
    assert {r["status"]: r["n"] for r in statuses} == {"assembled": len(orphan[1:]), "complete": 1, "duplicate": 2}
    assert pipeline.rows("select count(*) as n from {s}.stg_ces__events where status = 'assembled'"
                         f" and logicalid = '{orphan[0]['logicalid']}'") == [{"n": len(orphan)}]
