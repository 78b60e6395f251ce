"""Any SQL Server column name on every channel (docs/tables.md "Names"): a column whose name in the
exports and events is not a plain identifier (spaces, brackets, a quote, a dot, a leading digit,
letters outside ASCII, a Spark keyword) is declared with that `source_name` and a safe name of the
package's, the name scaffold proposes; change-table exports, CES and Debezium events of the same
history build the same marts, equal to the reference."""

from __future__ import annotations

import uuid
from dataclasses import replace

import pytest

from cdc_simulator import ces_writer, debezium_writer, landing_writer
from cdc_simulator.simulate import Simulator
from cdc_simulator.tables import Column, TableSpec
from runner.project.scaffold import column_name
from tests.conftest import Pipeline, copy_project, same_rows
from tests.expected import check_marts

SOURCES = (("Order ID", "int"), ("Order Date", "datetime2(3)"), ("[desc]", "nvarchar(100)"), ("o'name", "nvarchar(50)"),
           ("Unit.Price", "decimal(12,2)"), ("1st Qty", "int"), ("Größe", "nvarchar(20)"), ("Select", "bit"))
_taken: set[str] = set()
COLUMNS = tuple(Column(column_name(source, _taken), sql_type, i, source) for i, (source, sql_type) in enumerate(SOURCES, 1))
ODD = TableSpec("odd", "dbo_odd", (COLUMNS[0].name,), COLUMNS)
ODD_CES = replace(ODD, capture_instance=None, channel="ces", source=("Shop", "dbo", "Odd Items"))
ODD_DEBEZIUM = replace(ODD, capture_instance=None, channel="debezium", source=("ShopDb", "dbo", "odd"))


def test_scaffold_proposes_plain_names_and_keeps_the_source_names():
    assert [(c.name, c.source) for c in COLUMNS] == [
        ("order_id", "Order ID"), ("order_date", "Order Date"), ("desc", "[desc]"), ("o_name", "o'name"),
        ("unit_price", "Unit.Price"), ("c_1st_qty", "1st Qty"), ("grosse", "Größe"), ("Select", "Select")]
    taken = {"order_id"}
    assert column_name("Order_ID", taken) == "Order_ID_2" and column_name("operation", taken) == "operation_value"


def test_scaffold_declares_source_names_and_names_the_key_by_the_packages_name():
    from runner.project.scaffold import describe

    metadata = {"change_tables": [{"capture_instance": "dbo_odd", "source_schema": "dbo", "source_table": "odd",
                                   "index_column_list": "[Order ID]"}],
                "captured_columns": [{"capture_instance": "dbo_odd", "column_name": source, "column_ordinal": i,
                                      "column_type": sql_type.split("(")[0],
                                      **({"numeric_precision": 12, "numeric_scale": 2} if "decimal" in sql_type else {})}
                                     for i, (source, sql_type) in enumerate(SOURCES, 1)],
                "index_columns": []}
    (odd,) = describe(metadata, {})
    assert odd.problems == [] and odd.key == ["order_id"]
    declared = odd.declaration()["columns"]
    assert [(c["name"], c.get("source_name", c["name"])) for c in declared] == [(c.name, c.source) for c in COLUMNS]
    assert "source_name" not in declared[-1]  # Select is a plain identifier: kept as it is


def _declaration(**channel) -> dict:
    return {**channel, "key": [ODD.key[0]],
            "columns": [{"name": c.name, "type": c.type, "ordinal": c.ordinal,
                         **({"source_name": c.source} if c.source != c.name else {})} for c in COLUMNS]}


@pytest.mark.scenario
def test_columns_with_any_source_name_build_the_same_marts_on_every_channel(spark, tmp_path):
    project = copy_project(tmp_path / "project", {
        "odd": _declaration(channel="change_tables", capture_instance="dbo_odd", source_schema="dbo", source_table="odd"),
        "odd_ces": _declaration(channel="ces", source_database="Shop", source_schema="dbo", source_table="Odd Items"),
        "odd_debezium": _declaration(channel="debezium", source_database="ShopDb", source_schema="dbo", source_table="odd"),
    }, replace=True)
    landing = tmp_path / "landing"
    landing.mkdir()
    pipeline = Pipeline(spark, "t_" + uuid.uuid4().hex[:8], landing, project_dir=project)
    sim = Simulator([ODD], seed=13)
    txs = sim.run(40)
    assert {r.operation for tx in txs for r in tx.changes.get("odd", [])} == {1, 2, 3, 4}
    landing_writer.write_captured_columns(landing, [ODD])
    landing_writer.write_batch(landing, "b1", [ODD], txs, {"odd": "parquet"},
                               min_lsn={"dbo_odd": txs[0].begin_lsn})
    ces_writer.write_lines(landing / "ces" / "shop" / "b1.jsonl",
                           ces_writer.table_events(ODD_CES, txs, ces_writer.CesOptions(old_values=True)))
    renderer = debezium_writer.Renderer(ODD_DEBEZIUM, debezium_writer.DebeziumOptions(schema=True))
    debezium_writer.write_lines(landing / "debezium" / renderer.topic / "b1.jsonl", renderer.changes(txs))

    summary = {r["tracked_table"]: r for r in pipeline.run(strict=True)}
    assert {t: r["quarantined"] for t, r in summary.items()} == {"odd": 0, "odd_ces": 0, "odd_debezium": 0}
    check_marts(pipeline, sim, txs[-1].commit_lsn, tables=[ODD])
    values = [c.name for c in COLUMNS]
    for other in ("odd_ces", "odd_debezium"):
        assert same_rows(pipeline, "odd_current", f"{other}_current", values + ["commit_lsn", "operation"]) > 0
        assert same_rows(pipeline, "odd_history", f"{other}_history",
                         values + ["valid_from_lsn", "valid_to_lsn", "is_current", "operation"]) > 0
