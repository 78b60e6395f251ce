"""Upgrades (docs/operations.md "Upgrading"): the state layout's decisions without Spark, and every
recorded layout's fixture (tests/state_fixture.py) resumed by this release's code."""

from __future__ import annotations

import json
import re
import shutil
import tarfile
from pathlib import Path

import pytest

from runner.errors import UsageError
from runner.run import layout
from tests.conftest import Pipeline
from tests.state_fixture import FIXTURES, plain
from tests.state_fixture import path as fixture_path


def test_a_newer_layout_is_refused_an_older_one_migrated_in_order_and_a_bad_record_named():
    assert layout.migrations(layout.LAYOUT, "cdc.cdc_runs") == []
    assert layout.migrations(0, "cdc.cdc_runs") == [layout.MIGRATIONS[k] for k in sorted(layout.MIGRATIONS)]
    steps = {1: "sqlserver_cdc.migrate_1_to_2", 2: "sqlserver_cdc.migrate_2_to_3"}
    assert layout.migrations(1, "cdc.cdc_runs", current=3, steps=steps) == list(steps.values())
    assert layout.migrations(2, "cdc.cdc_runs", current=3, steps=steps) == ["sqlserver_cdc.migrate_2_to_3"]
    assert layout.migrations(0, "cdc.cdc_runs", current=3, steps=steps) == list(steps.values())
    with pytest.raises(UsageError, match=r"the warehouse of cdc\.cdc_runs has state layout 4, written by a newer "
                                         r"release.*writes layout 3.*Nothing was landed or changed"):
        layout.migrations(4, "cdc.cdc_runs", current=3, steps=steps)
    assert (layout.recorded(None), layout.recorded(""), layout.recorded("2")) == (0, 0, 2)
    with pytest.raises(UsageError, match=r"records the state layout 'two'.*sqlserver_cdc\.state_layout"):
        layout.recorded("two")


class _Dbt:
    """The dbt operations open_warehouse sends, answered as a warehouse of layout `found` would."""

    def __init__(self, found):
        self.found, self.calls = found, []

    def operation(self, macro, args):
        self.calls.append((macro, args))
        if macro == "sqlserver_cdc.record_layout":
            self.found = args["layout"]
        return {"open_run": {"layout": self.found, "ledger": "cdc.cdc_runs", "last_batch": ""}} \
            if macro == "sqlserver_cdc.open_run" else {}


def test_open_warehouse_records_the_layout_on_a_warehouse_without_one_after_its_migrations(monkeypatch):
    current = _Dbt(str(layout.LAYOUT))
    layout.open_warehouse(current, "cdc_raw", ["a.csv"])
    assert current.calls == [("sqlserver_cdc.open_run", {"raw_schema": "cdc_raw", "files": ["a.csv"], "layout": layout.LAYOUT})]
    unversioned = _Dbt(None)  # written before layouts were recorded: layout 1's shape, migrated as it
    assert layout.open_warehouse(unversioned, "cdc_raw", [])["layout"] == layout.LAYOUT
    assert [m for m, _ in unversioned.calls] == ["sqlserver_cdc.open_run", "sqlserver_cdc.migrate_to_layout_2",
                                                 "sqlserver_cdc.record_layout", "sqlserver_cdc.open_run"]
    monkeypatch.setattr(layout, "LAYOUT", 3)
    monkeypatch.setattr(layout, "MIGRATIONS", {1: "sqlserver_cdc.migrate_1_to_2", 2: "sqlserver_cdc.migrate_2_to_3"})
    older = _Dbt("1")
    assert layout.open_warehouse(older, "cdc_raw", [])["layout"] == 3
    # migrated in order, recorded, then opened again (a migration may change what open_run reports)
    assert [m for m, _ in older.calls] == ["sqlserver_cdc.open_run", "sqlserver_cdc.migrate_1_to_2",
                                          "sqlserver_cdc.migrate_2_to_3", "sqlserver_cdc.record_layout",
                                          "sqlserver_cdc.open_run"]
    with pytest.raises(UsageError, match="state layout 4"):
        layout.open_warehouse(_Dbt("4"), "cdc_raw", [])


def test_every_layout_up_to_this_release_has_its_fixture():
    assert {int(re.fullmatch(r"layout-(\d+)\.tar\.gz", p.name)[1]) for p in FIXTURES.glob("layout-*.tar.gz")} \
        == set(range(1, layout.LAYOUT + 1))


def _resume(spark, tmp_path: Path, written: int, project: Path) -> tuple[Pipeline, dict]:
    """The fixture of layout `written` unpacked, its tables registered at their folders and its views
    created in this session's metastore; returns the pipeline on it and the fixture's catalog."""
    with tarfile.open(fixture_path(written)) as archive:
        archive.extractall(tmp_path, filter="tar")
    catalog = json.loads((tmp_path / "catalog.json").read_text())
    for schema in {r["schema"] for r in catalog["relations"]}:
        spark.sql(f"create schema if not exists {schema}")
    for relation in catalog["relations"]:
        if "folder" in relation:
            spark.sql(f"create table {relation['schema']}.{relation['name']} using delta "
                      f"location '{tmp_path / 'warehouse' / relation['folder']}'")
    for relation in catalog["relations"]:
        if "view" in relation:
            spark.sql(relation["view"])
    return Pipeline(spark, catalog["schema"], tmp_path / "landing", project_dir=project), catalog


@pytest.mark.scenario
@pytest.mark.parametrize("written", range(1, layout.LAYOUT + 1))
def test_a_warehouse_of_an_earlier_layout_runs_on_with_nothing_lost_or_applied_twice(
        spark, tmp_path, change_tables_project, written):
    pipeline, catalog = _resume(spark, tmp_path, written, change_tables_project)
    assert catalog["layout"] == written
    ledger = f"{pipeline.schema}.cdc_runs"
    before = pipeline.rows(f"select run_id from {ledger} order by run_id")
    assert len(before) == 2
    pending = sorted(str(p.relative_to(tmp_path / "pending")) for p in (tmp_path / "pending").rglob("*") if p.is_file())
    shutil.copytree(tmp_path / "pending", pipeline.landing, dirs_exist_ok=True)

    pipeline.run(strict=True)

    runs = pipeline.rows(f"select run_id, status from {ledger} order by run_id")
    assert [r["run_id"] for r in runs[:2]] == [r["run_id"] for r in before] and runs[2]["status"] == "succeeded"
    # the run landed the pending batch's files and none of the files the earlier release landed
    landed = pipeline.rows(f"select distinct _source_file from {{s}}_raw.landed_rows where _batch_id = '{runs[2]['run_id']}'"
                           " and landing_kind not in ('landed_files', 'kafka_offsets')")
    assert sorted(r["_source_file"] for r in landed) == pending
    # the marts equal the reference's for every change, each applied once
    expected = json.loads((tmp_path / "expected.json").read_text())
    for mart, rows in expected.items():
        columns = sorted(rows[0])
        got = pipeline.rows(f"select {', '.join(columns)} from {{s}}.{mart}")
        assert sorted(json.dumps({c: plain(r[c]) for c in columns}, sort_keys=True) for r in got) == \
            sorted(json.dumps(r, sort_keys=True) for r in rows), mart
    properties = {r["key"]: r["value"] for r in pipeline.rows(f"show tblproperties {ledger}")}
    assert properties[layout.PROPERTY] == str(layout.LAYOUT)
    assert not pipeline.rows(f"select full_refresh from {ledger} order by run_id desc limit 1")[0]["full_refresh"]

    # a newer release's warehouse: refused by name before anything lands
    spark.sql(f"alter table {ledger} set tblproperties ('{layout.PROPERTY}' = '{layout.LAYOUT + 1}')")
    raw_version = pipeline.rows("describe history {s}_raw.landed_rows limit 1")[0]["version"]
    shutil.copy(tmp_path / "pending" / "cdc_metadata" / "lsn_time_mapping" / "b3.jsonl",
                pipeline.landing / "cdc_metadata" / "lsn_time_mapping" / "late.jsonl")
    with pytest.raises(UsageError, match=rf"the warehouse of {ledger} has state layout {layout.LAYOUT + 1}, written by "
                                         "a newer release"):
        pipeline.run()
    assert pipeline.rows("describe history {s}_raw.landed_rows limit 1")[0]["version"] == raw_version
    assert len(pipeline.rows(f"select run_id from {ledger}")) == 3
