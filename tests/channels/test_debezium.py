"""Debezium channel: the published captures stage to typed rows (plain JSON, schema envelope,
Avro-JSON unions); a DML history rendered as Debezium events (snapshot first, replays,
tombstones, Kafka records, logical types) builds the same marts as the same history through
change tables; bad lines, unknown operations and wrong encodings are quarantined while good
events still flow."""

from __future__ import annotations

import base64
import json
from dataclasses import replace
from datetime import datetime

import pytest
import yaml

from cdc_simulator import debezium_writer, landing_writer
from cdc_simulator.simulate import Column, Simulator, TableSpec, lsn_hex, replay
from tests.conftest import (
    FIXTURES,
    PROJECT_DIR,
    assert_raw_read_by_batch,
    last_execution,
    same_rows,
)
from tests.scenarios import DECLARED_COLUMNS, ITEM_COLUMNS, ITEMS, ITEMS_CT
from tests.scenarios import debezium_pipeline as _pipeline

SAMPLES = FIXTURES / "reference" / "debezium"
DECLARED = yaml.safe_load((PROJECT_DIR / "dbt_project.yml").read_text())["vars"]["cdc_tracked_tables"]


def _columns(*specs: tuple[str, str]) -> list[dict]:
    return [{"name": name, "type": sql_type, "ordinal": i} for i, (name, sql_type) in enumerate(specs, start=1)]


SAMPLE_TABLES = {
    # 1.1.2 snapshot row (op r), plain JSON without schema
    "gps": {"channel": "debezium", "source_database": "IPMS4S_HRXJ_JK", "source_schema": "dbo",
            "source_table": "Emp_GpsDtata", "key": ["HisUid"], "columns": _columns(
                ("HisUid", "bigint"), ("EmployeeID", "varchar(20)"), ("EmployeeName", "nvarchar(50)"),
                ("GpsTime", "datetime"), ("Longitude", "float"), ("Latitude", "float"), ("Speed", "float"),
                ("Angle", "float"), ("VsTime", "datetime"))},
    # 1.7.1 Avro-JSON unions (snapshot rows, then creates) and the schema envelope of seed 003
    "customers": {"channel": "debezium", "source_database": "testDB", "source_schema": "dbo",
                  "source_table": "customers", "key": ["id"], "columns": _columns(
                      ("id", "int"), ("first_name", "varchar(255)"), ("last_name", "varchar(255)"),
                      ("email", "varchar(255)"), ("phone_number", "varchar(40)"))},
    # 1.9.6 insert
    "adventure_customer": {"channel": "debezium", "source_schema": "SalesLT", "source_table": "Customer",
                           "key": ["CustomerID"], "columns": _columns(
                               ("CustomerID", "int"), ("NameStyle", "bit"), ("Title", "nvarchar(8)"),
                               ("FirstName", "nvarchar(50)"), ("MiddleName", "nvarchar(50)"),
                               ("LastName", "nvarchar(50)"), ("Suffix", "nvarchar(10)"),
                               ("CompanyName", "nvarchar(128)"), ("SalesPerson", "nvarchar(256)"),
                               ("EmailAddress", "nvarchar(50)"), ("Phone", "nvarchar(25)"),
                               ("PasswordHash", "varchar(128)"), ("PasswordSalt", "varchar(10)"),
                               ("rowguid", "uniqueidentifier"), ("ModifiedDate", "datetime"))},
    # Flink CDC 1.9.7: create, delete, update
    "cdc_test": {"channel": "debezium", "source_database": "realtime_v3", "source_schema": "dbo",
                 "source_table": "cdc_test", "key": ["id"], "columns": _columns(
                     ("id", "int"), ("name", "varchar(50)"), ("ts", "datetime2(3)"))},
}


def _lines(path) -> list[str]:
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".jsonl":
        return [line for line in text.splitlines() if line.strip()]
    return [json.dumps(json.loads(text), ensure_ascii=False)]


def _project(row: dict, names: list[str]) -> tuple:
    return tuple(row[n] for n in names)


def test_published_captures_stage_to_typed_rows(spark, tmp_path):
    pipeline = _pipeline(spark, tmp_path, SAMPLE_TABLES)
    folder = pipeline.landing / "debezium" / "captures"
    folder.mkdir(parents=True)
    samples = sorted(SAMPLES.glob("*.json*"))
    assert len(samples) == 5
    (folder / "captures.jsonl").write_text("\n".join(line for p in samples for line in _lines(p)) + "\n",
                                           encoding="utf-8")
    summary = {r["tracked_table"]: r for r in pipeline.run()}
    assert {name: r["quarantined"] for name, r in summary.items()} == {name: 0 for name in SAMPLE_TABLES}
    assert pipeline.rows("select count(*) as n from {s}.cdc_quarantine") == [{"n": 0}]

    gps = pipeline.table("stg_debezium__gps", "HisUid")
    assert [_project(r, ["commit_lsn", "change_lsn", "command_id", "operation", "operation_code", "HisUid",
                         "EmployeeID", "EmployeeName", "GpsTime", "Longitude", "Latitude", "Speed", "Angle",
                         "VsTime", "commit_time"]) for r in gps] == [
        ("000052F200000538001F", "00000000000000000000", 0, "snapshot", 2, 20191104092565508, "1432", "张阳",
         datetime(2019, 11, 4, 9, 23, 17), 30.36314, 120.2156272, 11.1, 62.6, datetime(2019, 11, 4, 9, 25, 14),
         datetime(2020, 11, 23, 14, 51, 55, 835000))]

    customers = pipeline.table("stg_debezium__customers", "commit_lsn, id")
    assert [_project(r, ["commit_lsn", "change_lsn", "command_id", "operation", "id", "first_name", "last_name",
                         "email", "phone_number", "_has_phone_number"]) for r in customers] == [
        ("0000002500000410000" + "1", "00000000000000000000", 0, "snapshot", 1001, "Sally", "Thomas",
         "sally.thomas@acme.com", None, True),
        ("00000025000004100001", "00000000000000000000", 0, "snapshot", 1002, "George", "Bailey",
         "gbailey@foobar.com", None, True),
        ("00000025000004100001", "00000000000000000000", 0, "snapshot", 1003, "Edward", "Walker", "ed@walker.com",
         None, True),
        ("00000025000004100001", "00000000000000000000", 0, "snapshot", 1004, "Anne", "Kretchmar",
         "annek@noanswer.org", None, True),
        ("00000025000004E80005", "00000025000004E80003", 1, "insert", 1005, "Pam2", "Thomas", "pam@office.com", None,
         True),
        ("00000026000006900005", "00000026000006900003", 1, "insert", 1006, "John", "Doe", "john.doe@example.com",
         "+1-555-123456", True),
        # seed 003: the schema envelope, event_serial_no as the string "1"
        ("00000027000007580005", "00000027000007580003", 1, "insert", 1005, "john", "doe", "john.doe@example.org",
         None, True),
    ]
    assert customers[4]["commit_time"] == datetime(2021, 12, 16, 10, 40, 56, 73000)

    adventure = pipeline.table("stg_debezium__adventure_customer", "CustomerID")
    assert [_project(r, ["commit_lsn", "change_lsn", "command_id", "operation", "CustomerID", "NameStyle", "Title",
                         "FirstName", "LastName", "EmailAddress", "PasswordHash", "rowguid", "ModifiedDate",
                         "commit_time"]) for r in adventure] == [
        ("00000069000006900009", "00000069000006900004", 1, "insert", 30147, False, None, "Beautiful", "Pare",
         "Beautiful.Pare@dss23.com", "***", "DAF1B0F5-609B-4C0D-A9DC-C26E88006922",
         datetime(2023, 10, 23, 18, 32, 5, 673000), datetime(2023, 10, 23, 18, 32, 5, 693000))]

    cdc_test = pipeline.table("stg_debezium__cdc_test", "commit_lsn")
    assert [_project(r, ["commit_lsn", "change_lsn", "command_id", "operation", "id", "name", "ts", "update_mask"])
            for r in cdc_test] == [
        ("0000002B000002E30003", "0000002B000002E30002", 1, "insert", 9, "jjj",
         datetime(2025, 7, 24, 8, 46, 15, 537000), bytes([0x07])),
        ("0000002B000002F60003", "0000002B000002F60002", 1, "delete", 9, "jjj",
         datetime(2025, 7, 24, 8, 46, 15, 537000), bytes([0x07])),
        # before and after differ in name only: the mask holds column 2
        ("0000002B0000030A0003", "0000002B0000030A0002", 2, "update_after", 5, "eee",
         datetime(2025, 7, 23, 16, 4, 5, 690000), bytes([0x02])),
    ]

    # the marts follow: snapshot rows are the state at their LSN, later changes apply on top
    current = pipeline.table("customers_current", "id")
    assert [(r["id"], r["first_name"], r["commit_lsn"], r["operation"]) for r in current] == [
        (1001, "Sally", "00000025000004100001", "snapshot"), (1002, "George", "00000025000004100001", "snapshot"),
        (1003, "Edward", "00000025000004100001", "snapshot"), (1004, "Anne", "00000025000004100001", "snapshot"),
        (1005, "john", "00000027000007580005", "insert"), (1006, "John", "00000026000006900005", "insert")]
    assert [(r["id"], r["name"]) for r in pipeline.table("cdc_test_current", "id")] == [(5, "eee")]
    history = pipeline.table("cdc_test_history", "valid_from_lsn")
    assert [(r["id"], r["valid_from_lsn"], r["valid_to_lsn"], r["operation"], r["changed_columns"])
            for r in history] == [
        (9, "0000002B000002E30003", "0000002B000002F60003", "insert", ["id", "name", "ts"]),
        (5, "0000002B0000030A0003", None, "update", ["name"]),
    ]


def _is_tombstone(line: str) -> bool:
    """A null value, bare or as a whole Kafka record's."""
    value = json.loads(line)
    return value is None or ("partition" in value and value.get("value") is None)


@pytest.mark.scenario
def test_debezium_events_build_the_marts_change_tables_build(spark, tmp_path):
    pipeline = _pipeline(spark, tmp_path, {
        "items_ct": {"channel": "change_tables", "capture_instance": "dbo_items", "key": ["item_id"],
                     "columns": DECLARED_COLUMNS},
        "items_dbz": {"channel": "debezium", "source_database": "ShopDb", "source_schema": "dbo",
                      "source_table": "items", "key": ["item_id"], "columns": DECLARED_COLUMNS},
    })
    sim = Simulator([ITEMS], seed=41)
    txs = [sim.transaction(statements=6, kinds=("insert",))] + sim.run(150)
    assert {r.operation for tx in txs for r in tx.changes.get("items", [])} == {1, 2, 3, 4}
    # the connector's forms over time: plain JSON; schemas enabled, written as whole Kafka records;
    # Avro-JSON unions with event_serial_no as a string
    forms = [debezium_writer.DebeziumOptions(),
             debezium_writer.DebeziumOptions(schema=True, kafka_record=True),
             debezium_writer.DebeziumOptions(avro_unions=True, serial_as_string=True)]
    cuts = [(1, 50), (50, 100), (100, len(txs))]
    batches = []
    for (lo, hi), options in zip(cuts, forms):
        renderer = debezium_writer.Renderer(ITEMS, options)
        lines = renderer.snapshot(list(replay([ITEMS], txs[:1])["items"].values()), txs[0].commit_lsn,
                                  txs[0].end_time) if lo == 1 else []
        batches.append(lines + renderer.changes(txs[lo:hi]))
    assert any("op\": \"r\"" in line for line in batches[0])
    assert sum(line == "null" for line in batches[0]) > 5  # tombstones after deletes
    pk_updates = [line for line in batches[1] if '"event_serial_no": 2' in line and '"op": "c"' in line]
    assert pk_updates  # a primary-key update: delete (1), tombstone, create (2) sharing both LSNs
    # a lagging partition: a tenth of batch 1's events arrive with batch 2 (below the watermark);
    # a connector restart replays the end of each batch at the start of the next
    late = batches[1][::10]
    batches[1] = [line for i, line in enumerate(batches[1]) if i % 10]
    batches[2] = late + batches[2]
    replays = [batches[0][-15:], batches[1][-15:]]
    batches[1] = replays[0] + batches[1]
    batches[2] = replays[1] + batches[2]
    replayed_events = sum(1 for lines in replays for line in lines if not _is_tombstone(line))

    landing_writer.write_captured_columns(pipeline.landing, [ITEMS_CT])
    # the change-table twin starts from a snapshot at the same LSN (its versions say snapshot too)
    landing_writer.write_snapshot(pipeline.landing, "s0", replace(ITEMS_CT, name="items_ct"),
                                  list(replay([ITEMS], txs[:1])["items"].values()), txs[0].commit_lsn)
    for i, (lo, hi) in enumerate([(0, 50), (50, 100), (100, len(txs))]):
        landing_writer.write_batch(pipeline.landing, f"b{i}", [ITEMS_CT], txs[lo:hi], {"items": "csv"},
                                   min_lsn={"dbo_items": txs[0].begin_lsn} if i == 0 else None)
        debezium_writer.write_lines(pipeline.landing / "debezium" / "server1.ShopDb.dbo.items" / f"b{i}.jsonl",
                                    batches[i])
        before = last_execution(spark)
        nodes: list = []
        summary = {r["tracked_table"]: r for r in pipeline.run(nodes=nodes)}
        if i > 0:
            # incremental staging: the run read only its batch of landed lines, staged each once,
            # in one statement (the replay check's floor came from the run's facts: no second
            # decode of the lines to find it)
            assert_raw_read_by_batch(pipeline, before)
            write = spark.sql(f"describe history {pipeline.schema}.stg_debezium__events limit 1").collect()[0]
            assert int(write["operationMetrics"]["numOutputRows"]) == len(batches[i])
            events = [n for n in nodes if n.name == "stg_debezium__events"]
            assert len(events) == 1 and len(events[0].statements) == 1, events
        if i == 1:
            watermark = summary["items_dbz"]["lsn_reached"]
            assert any(json.loads(line)["value"]["payload"]["source"]["commit_lsn"].replace(":", "").upper()
                       < watermark for line in late if json.loads(line)["value"])
    assert summary["items_dbz"]["lsn_reached"] == summary["items_ct"]["lsn_reached"] == lsn_hex(txs[-1].commit_lsn)
    assert pipeline.rows("select count(*) as n from {s}.cdc_quarantine") == [{"n": 0}]
    statuses = {r["status"]: r["n"] for r in pipeline.rows(
        "select status, count(*) as n from {s}.stg_debezium__events group by status")}
    assert statuses["duplicate"] == replayed_events > 20 and statuses["tombstone"] > 10

    values = [c.name for c in ITEM_COLUMNS]
    current = values + ["commit_lsn", "commit_time", "operation", "is_deleted"]
    history = values + ["valid_from_lsn", "valid_to_lsn", "valid_from", "valid_to", "is_current", "operation",
                        "is_deleted"]
    assert same_rows(pipeline, "items_ct_current", "items_dbz_current", current) > 20
    assert same_rows(pipeline, "items_ct_history", "items_dbz_history", history) > 100
    _check_changed_columns(pipeline)
    # rebuilt from what is staged, then with staging rebuilt from the landed events: the same marts
    for rebuild in ({"full_refresh": True}, {"restage": True}):
        pipeline.run(**rebuild)
        same_rows(pipeline, "items_ct_current", "items_dbz_current", current)
        same_rows(pipeline, "items_ct_history", "items_dbz_history", history)


def _check_changed_columns(pipeline) -> None:
    """Debezium sends no update mask: the columns whose value differs between before and after
    are the changed ones, a subset of the SET columns the change table's mask names."""
    pairs = pipeline.rows(
        "select ct.changed_columns as ct, dbz.changed_columns as dbz from {s}.items_ct_history as ct"
        " join {s}.items_dbz_history as dbz on ct.item_id = dbz.item_id and ct.valid_from_lsn = dbz.valid_from_lsn")
    assert len(pairs) > 100
    assert all(set(p["dbz"]) <= set(p["ct"]) for p in pairs)
    assert sum(p["dbz"] == p["ct"] for p in pairs) > len(pairs) * 0.9


PRODUCT_COLUMNS = tuple(Column(c["name"], c["type"], c["ordinal"]) for c in DECLARED["products"]["columns"])
PRODUCTS = TableSpec("products", None, ("product_id",), PRODUCT_COLUMNS, "debezium", ("ShopDb", "dbo", "products"))
FLAT = TableSpec("items_flat", None, ("item_id",), ITEM_COLUMNS, "debezium", ("ShopDb", "dbo", "items"))


def _variant(line: str, lsn: int, key: int, op: str | None = None, **after) -> str:
    """A copy of a create event (schema envelope) as another event: new LSNs, key and values."""
    event = json.loads(line)
    payload = event["payload"]
    colons = lsn_hex(lsn).lower()
    payload["source"]["commit_lsn"] = f"{colons[:8]}:{colons[8:16]}:{colons[16:]}"
    payload["source"]["change_lsn"] = payload["source"]["commit_lsn"]
    payload["after"] = {**payload["after"], "product_id": key, **after}
    payload["op"] = op or payload["op"]
    return json.dumps(event)


@pytest.mark.scenario
def test_bad_lines_unknown_operations_and_wrong_encodings_are_quarantined_flattened_rows_apply(
        spark, tmp_path, monkeypatch):
    from tests.expected import check_marts, snapshot_versions

    pipeline = _pipeline(spark, tmp_path, {
        "products": DECLARED["products"],
        "items_flat": {"channel": "debezium", "topic": "server1.ShopDb.dbo.items", "key": ["item_id"],
                       "columns": DECLARED_COLUMNS, "debezium": {"flattened": True}},
    })
    sim = Simulator([PRODUCTS, FLAT], seed=43)
    txs = [sim.transaction(statements=4, kinds=("insert",))] + sim.run(60)
    products = debezium_writer.Renderer(PRODUCTS, debezium_writer.DebeziumOptions(schema=True))
    good = products.snapshot(list(replay([PRODUCTS, FLAT], txs[:1])["products"].values()), txs[0].commit_lsn,
                             txs[0].end_time) + products.changes(txs[1:])
    flat = debezium_writer.Renderer(FLAT, debezium_writer.DebeziumOptions(flattened=True, kafka_record=True))
    flat_lines = flat.changes(txs)
    assert any('"__deleted": "true"' in line for line in flat_lines)

    create = next(line for line in good if '"op": "c"' in line)
    top = txs[-1].commit_lsn
    bad_lsn = json.loads(_variant(create, top + 2, 9002))["payload"]["source"]["commit_lsn"]
    flattened_here = json.dumps({**json.loads(flat_lines[0])["value"]})
    bad_events = [
        "this is not JSON",
        json.dumps({"hello": "world"}),
        _variant(create, top + 1, 9001, op="x"),
        _variant(create, top + 2, 9002).replace(f'"commit_lsn": "{lsn_hex(top + 2).lower()[:8]}', '"commit_lsn": "zz'),
        json.dumps({"topic": products.topic, "partition": 0, "offset": 1, "key": None, "value": "oops"}),
        json.dumps({**json.loads(create), "payload": {**json.loads(create)["payload"], "after": None}}),
    ]
    huge = base64.b64encode((10**12).to_bytes(6, "big", signed=True)).decode()
    bad_values = [
        _variant(create, top + 3, 9003, price="12.5"),
        _variant(create, top + 4, 9004, launched_on="2024-01-01"),
        _variant(create, top + 5, 9005, price=huge),
        flattened_here,
    ]
    folder = pipeline.landing / "debezium" / products.topic
    debezium_writer.write_lines(folder / "b1.jsonl", good + bad_events + bad_values)
    debezium_writer.write_lines(pipeline.landing / "debezium" / flat.topic / "b1.jsonl", flat_lines)
    summary = {r["tracked_table"]: r for r in pipeline.run()}
    assert summary["products"]["quarantined"] == 4 and summary["items_flat"]["quarantined"] == 0
    reasons = pipeline.rows("select tracked_table, quarantine_reason from {s}.cdc_quarantine order by quarantine_reason")
    decimal = "org.apache.kafka.connect.data.Decimal (base64 of the unscaled big-endian two's-complement integer)"
    assert [(r["tracked_table"], r["quarantine_reason"]) for r in reasons] == [
        (None, "Kafka record value is not a JSON object: oops"),
        # an items row: it carries no product_id either
        ("products", ("a flattened (ExtractNewRecordState) event, but table products does not declare "
                     "debezium.flattened: true; key column product_id is missing")),
        ("products", ('column launched_on: value "2024-01-01" is not a valid io.debezium.time.Date '
                     "(days since 1970-01-01)")),
        ("products", 'column price: value "1000000000000E-2" is not a valid decimal(10,2)'),
        ("products", f'column price: value "12.5" is not a valid {decimal}'),
        (None, "invalid LSN in source.commit_lsn: zz" + bad_lsn[8:]),
        (None, "not a Debezium change event (no op and source, and no __ fields of a flattened event)"),
        (None, "not a JSON object"),
        (None, "op c without an after row"),
        (None, "unknown op: x"),
    ]
    statuses = {r["status"]: r["n"] for r in pipeline.rows(
        "select status, count(*) as n from {s}.stg_debezium__events group by status")}
    assert statuses["tombstone"] == sum(line == "null" for line in good) + sum(
        json.loads(line)["value"] is None for line in flat_lines) > 5
    # every good event applied, flattened rows (deletes rewritten with __deleted) included
    snapshot_versions(monkeypatch, {txs[0].commit_lsn}, {"products"})  # the products' snapshot opens them
    check_marts(pipeline, sim, None, tables=[PRODUCTS, FLAT])
