"""Debezium channel: the published captures stage to typed rows (plain JSON, schema envelope,
Avro-JSON unions); a DML history rendered as Debezium events (snapshot first, replays,
tombstones, Kafka records, logical types) builds the same marts as the same history through
change tables; bad lines, unknown operations and wrong encodings are quarantined while good
events still flow."""

from __future__ import annotations

import json
import uuid
from datetime import datetime

from tests.conftest import FIXTURES, Pipeline, copy_project

SAMPLES = FIXTURES / "reference" / "debezium"


def _pipeline(spark, tmp_path, tables: dict, replace=True) -> Pipeline:
    project = copy_project(tmp_path / "project", tables, replace=replace)
    (tmp_path / "landing").mkdir()
    return Pipeline(spark, "t_" + uuid.uuid4().hex[:8], tmp_path / "landing", project_dir=project)


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
        (1001, "Sally", "00000025000004100001", "insert"), (1002, "George", "00000025000004100001", "insert"),
        (1003, "Edward", "00000025000004100001", "insert"), (1004, "Anne", "00000025000004100001", "insert"),
        (1005, "john", "00000027000007580005", "insert"), (1006, "John", "00000026000006900005", "insert")]
    assert [(r["id"], r["name"]) for r in pipeline.table("cdc_test_current", "id")] == [(5, "eee")]
    history = pipeline.table("cdc_test_history", "valid_from_lsn")
    assert [(r["id"], r["valid_from_lsn"], r["valid_to_lsn"], r["operation"], r["changed_columns"])
            for r in history] == [
        (9, "0000002B000002E30003", "0000002B000002F60003", "insert", ["id", "name", "ts"]),
        (5, "0000002B0000030A0003", None, "update", ["name"]),
    ]
