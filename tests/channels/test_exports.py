"""Export manifests (docs/landing.md "Export manifests"): the change-table cut is the smallest LSN every
declared capture instance's exports reach, so a lagging export holds the marts back instead of
losing its rows; files cut short are refused whole and hold their table."""

from __future__ import annotations

import io
import json
import uuid

import pytest

from cdc_simulator import landing_writer
from cdc_simulator.simulate import Simulator, lsn_hex
from runner.errors import PipelineFailed
from runner.run import report
from runner.run.dbt import Dbt, failures
from runner.sources import landing
from tests.conftest import Pipeline, copy_project
from tests.expected import check_marts
from tests.scenarios import CHANGE_TABLES as TABLES
from tests.scenarios import FORMATS

CUSTOMERS, ORDER_LINES = (next(t for t in TABLES if t.name == name) for name in ("customers", "order_lines"))


def _manifest(folder, name, files, after=None, through="0x0000002C000003000010", **extra):
    doc = {"capture_instance": folder.name, "after_lsn": after, "through_lsn": through, "files": files, **extra}
    (folder / name).write_text(json.dumps(doc))


def _entries(root):
    return {e["relative"]: e for e in landing.files_to_land(root)}


def test_files_cut_short_and_bad_manifests_are_refused_and_unlisted_files_wait(tmp_path):
    ct = tmp_path / "change_tables"
    plain, managed = ct / "dbo_plain", ct / "dbo_managed"
    plain.mkdir(parents=True)
    managed.mkdir()
    (plain / "whole.csv").write_text("a,b\n1,2\n")
    (plain / "cut.csv").write_text("a,b\n1,2\n3")
    (plain / "empty.csv").write_text("")
    (plain / "whole.parquet").write_bytes(b"PAR1" + b"\0" * 8 + (8).to_bytes(4, "little") + b"PAR1")
    (plain / "bad_footer.parquet").write_bytes(b"PAR1" + b"\0" * 8 + (99).to_bytes(4, "little") + b"PAR1")
    (plain / "no_footer.parquet").write_bytes(b"PAR1" + b"\0" * 20)
    (managed / "e1.csv").write_text("a\n1\n2\n")
    (managed / "e2.csv").write_text("a\n1\n")
    (managed / "e3.csv").write_text("a\n1\n")
    (managed / "stray.csv").write_text("a\n1\n")
    _manifest(managed, "m1.manifest.json", [{"path": "e1.csv", "rows": 2}])
    _manifest(managed, "m2.manifest.json", [{"path": "e2.csv", "rows": 1, "bytes": 99}, {"path": "e3.csv", "rows": 1}])
    _manifest(managed, "m3.manifest.json", [{"path": "later.csv", "rows": 1}])
    (managed / "m4.manifest.json").write_text("{not json")
    _manifest(managed, "m5.manifest.json", [], capture_instance="dbo_other")
    _manifest(managed, "m6.manifest.json", [{"path": "../dbo_plain/whole.csv", "rows": 1}])
    (managed / "m7.manifest.json").write_text(json.dumps(
        {"capture_instance": "dbo_managed", "files": [{"path": "e1.csv", "rows": "2"}], "note": 1}))

    snaps = tmp_path / "snapshots"
    (snaps / "customers").mkdir(parents=True)
    (snaps / "places").mkdir()
    (snaps / "customers" / "s1.csv").write_text("id\n1\n")
    (snaps / "customers" / "s1.manifest.json").write_text(json.dumps(
        {"table": "customers", "snapshot_lsn": "0x0000002C000003000010", "files": [{"path": "s1.csv", "rows": 1}]}))
    (snaps / "places" / "alone.csv").write_text("id\n1\n")
    (snaps / "places" / "other.manifest.json").write_text(json.dumps(
        {"table": "customers", "snapshot_lsn": "0x0000002C000003000010", "files": []}))

    got = _entries(tmp_path)

    def state(relative):
        e = got[relative]
        return "refused" if "refused" in e else "waiting" if "waiting" in e else "lands"

    assert {r: state(r) for r in got} == {
        "change_tables/dbo_plain/whole.csv": "lands",
        "change_tables/dbo_plain/cut.csv": "refused",
        "change_tables/dbo_plain/empty.csv": "refused",
        "change_tables/dbo_plain/whole.parquet": "lands",
        "change_tables/dbo_plain/no_footer.parquet": "refused",
        "change_tables/dbo_plain/bad_footer.parquet": "refused",
        "change_tables/dbo_managed/e1.csv": "lands",
        "change_tables/dbo_managed/m1.manifest.json": "lands",
        # a wrong size refuses the file, its manifest and the manifest's other file
        "change_tables/dbo_managed/e2.csv": "refused",
        "change_tables/dbo_managed/e3.csv": "refused",
        "change_tables/dbo_managed/m2.manifest.json": "refused",
        # a listed file still missing: the manifest waits
        "change_tables/dbo_managed/m3.manifest.json": "waiting",
        "change_tables/dbo_managed/m4.manifest.json": "refused",
        "change_tables/dbo_managed/m5.manifest.json": "refused",
        "change_tables/dbo_managed/m6.manifest.json": "refused",
        "change_tables/dbo_managed/m7.manifest.json": "refused",
        # once a folder has manifests, files none lists wait
        "change_tables/dbo_managed/stray.csv": "waiting",
        # a snapshot needs its manifest, which names its table
        "snapshots/customers/s1.csv": "lands",
        "snapshots/customers/s1.manifest.json": "lands",
        "snapshots/places/alone.csv": "waiting",
        "snapshots/places/other.manifest.json": "refused",
    }
    assert "last row was cut short" in got["change_tables/dbo_plain/cut.csv"]["refused"]
    assert "no PAR1 footer" in got["change_tables/dbo_plain/no_footer.parquet"]["refused"]
    assert "4 bytes, but its export manifest says 99" in got["change_tables/dbo_managed/e2.csv"]["refused"]
    assert "m2.manifest.json is refused" in got["change_tables/dbo_managed/e3.csv"]["refused"]
    assert "not a JSON document" in got["change_tables/dbo_managed/m4.manifest.json"]["refused"]
    assert "in the folder of dbo_managed" in got["change_tables/dbo_managed/m5.manifest.json"]["refused"]
    assert "outside change_tables/dbo_managed/" in got["change_tables/dbo_managed/m6.manifest.json"]["refused"]
    # a manifest's mistakes are named by field (runner/project/config.py)
    assert got["change_tables/dbo_managed/m7.manifest.json"]["refused"].startswith(
        "export manifest: unknown field(s) note; through_lsn: Field required; files.0.rows: Input should be a valid "
        "integer; this manifest has capture_instance, through_lsn, after_lsn and files")
    assert got["change_tables/dbo_managed/m1.manifest.json"]["rows_by_file"] == {"change_tables/dbo_managed/e1.csv": 2}
    assert got["snapshots/customers/s1.manifest.json"]["kind"] == "snapshot_manifest"
    assert got["snapshots/customers/s1.manifest.json"]["lsns"] == {"snapshot_lsn": "0x0000002C000003000010"}
    assert "a snapshot lands only with its manifest" in got["snapshots/places/alone.csv"]["waiting"]
    assert "table is 'customers', but the manifest is in the folder of places" in got["snapshots/places/other.manifest.json"]["refused"]
    # what waits is said once per folder and kind of wait, with the remedy (runner/run/report.py waiting_lines)
    (managed / "stray2.csv").write_text("a\n1\n")
    waiting = [{"file": r, "reason": e["waiting"], "wait": e["wait"]} for r, e in sorted(_entries(tmp_path).items())
               if "waiting" in e]
    assert report.waiting_lines(waiting) == [
        "waiting: change_tables/dbo_managed/: 1 file(s) of an export whose manifest lists files that are not in the "
        "landing folder yet (m3.manifest.json; m3.manifest.json lists later.csv, which is not in the landing folder yet): "
        + landing.WAITS["incomplete"][1],
        "waiting: change_tables/dbo_managed/: 2 file(s) that no export manifest lists, in a folder that holds export "
        "manifests (stray.csv, stray2.csv): " + landing.WAITS["unlisted"][1],
        "waiting: snapshots/places/: 1 file(s) of a snapshot without its manifest (alone.csv): "
        + landing.WAITS["snapshot_manifest"][1],
    ]
    assert "land the manifest of the export they belong to" in landing.WAITS["unlisted"][1]


@pytest.fixture(scope="module")
def required_project(tmp_path_factory):
    from tests.conftest import EVENT_TABLES

    project = copy_project(tmp_path_factory.mktemp("exports") / "project", {}, drop=EVENT_TABLES)
    config = project / "dbt_project.yml"
    config.write_text(config.read_text().replace("cdc_export_manifests: optional", "cdc_export_manifests: required"))
    return project


def _run(pipeline):
    """Runs the pipeline; returns its output and whether it failed (the runner's exit 1)."""
    out = io.StringIO()
    try:
        pipeline.run(progress=report.Progress(stream=out))
    except PipelineFailed as exc:
        return out.getvalue() + str(exc), True
    return out.getvalue(), False


@pytest.mark.scenario
def test_a_lagging_export_holds_the_cut_and_loses_nothing_and_a_cut_file_is_refused_whole(spark, tmp_path, required_project):
    """order_lines' exports land two batches after customers' (and after the lsn_time_mapping):
    after every run both marts equal the source as of the cut, the laggard is named, and in the
    end every change is applied. A Parquet export without its footer and a CSV export short of
    its manifest's rows are refused with their manifests, land nothing, and hold the cut."""
    pipeline = Pipeline(spark, "x_" + uuid.uuid4().hex[:8], tmp_path / "landing", project_dir=required_project)
    pipeline.landing.mkdir()
    # a run ledger as an earlier release created it: the first run adds the columns it lacks
    spark.sql(f"create schema {pipeline.schema}")
    spark.sql(f"create table {pipeline.schema}.cdc_runs (run_id string, started_at timestamp, ended_at timestamp, "
              "status string, full_refresh boolean, since_run_id string, landed map<string, bigint>, "
              "landed_lsn map<string, string>, upper_lsn map<string, string>, upper_batch map<string, string>, "
              "tables array<struct<tracked_table: string, rows_landed: bigint, quarantined: bigint, "
              "changes_applied: bigint, lsn_reached: string, advanced: boolean, lag_seconds: bigint, "
              "current_rows: bigint, history_versions: bigint>>, streams array<struct<channel: string, "
              "lines_landed: bigint, duplicates: bigint, pending_messages: bigint, tombstones: bigint, "
              "quarantined: bigint, quarantined_total: bigint>>, failed_nodes array<string>) using delta")
    landing_writer.write_captured_columns(pipeline.landing, TABLES)
    sim = Simulator(TABLES, seed=23)
    steps = [sim.run(18) for _ in range(5)]
    through = [s[-1].commit_lsn for s in steps]
    landing_writer.write_change_tables(pipeline.landing, "m0", TABLES, {t.capture_instance: steps[0][0].begin_lsn for t in TABLES})

    def export(table, k, **kw):
        landing_writer.write_export(pipeline.landing, f"e{k + 1}", table, steps[k], FORMATS[table.name],
                                    after=through[k - 1] if k else None, through=through[k], **kw)

    for k in range(5):
        landing_writer.write_batch(pipeline.landing, f"m{k + 1}", [], [], {}, mapped=steps[k])
        export(CUSTOMERS, k)
        if k >= 2:
            export(ORDER_LINES, k - 2)
        saved = {}
        if k == 3:
            # customers' 4th export: its Parquet file is cut before its footer; order_lines' 2nd:
            # a CSV cut at a row boundary (it still ends with a line break) without a byte count
            for folder, name in ((CUSTOMERS.capture_instance, "e4.parquet"), (ORDER_LINES.capture_instance, "e2.csv")):
                path = pipeline.landing / "change_tables" / folder / name
                saved[path] = path.read_bytes()
                lines = saved[path].splitlines(keepends=True)
                path.write_bytes(saved[path][: len(saved[path]) // 2] if name.endswith("parquet") else b"".join(lines[:-3]))
            m = pipeline.landing / "change_tables" / ORDER_LINES.capture_instance / "e2.manifest.json"
            doc = json.loads(m.read_text())
            doc["files"][0].pop("bytes")
            m.write_text(json.dumps(doc))
        output, failed = _run(pipeline)
        # the cut: where both tables' exports reach without a gap, and never past the mapping
        reached_ol = k - 2 if k != 3 else 0
        reached_c = k if k != 3 else 2
        cut_step = min(reached_ol, reached_c)
        if cut_step < 0:
            assert "cut held back by order_lines: its export (sales_order_lines) has no manifest landed yet" in output
            check_marts(pipeline, sim, 0)
        else:
            check_marts(pipeline, sim, through[cut_step])
            assert f"window (change_tables): changes up to LSN 0x{lsn_hex(through[cut_step])}" in output
            assert ("cut held back by order_lines" if reached_ol <= reached_c else "cut held back by customers") in output
        assert failed == (k == 3), output[-2000:]
        if k == 3:
            assert "REFUSED change_tables/dbo_customers/e4.parquet: not a whole Parquet file" in output
            assert ("REFUSED change_tables/sales_order_lines/e2.csv: " in output
                    and "rows, but its export manifest change_tables/sales_order_lines/e2.manifest.json says" in output)
            # the two files and their manifests
            assert "4 landing file(s) were refused (listed above) and landed nothing" in output
            refused = pipeline.rows("select count(*) as n from {s}_raw.landed_rows where _source_file rlike 'e4[.]|sales_order_lines/e2[.]'")
            assert refused == [{"n": 0}]
            for path, data in saved.items():  # a complete copy under the same name
                path.write_bytes(data)
        if k == 4:
            # a plain `dbt build` holds at the cut the last run recorded too, and so does a plain
            # `dbt build --full-refresh`, which rebuilds staging and marts up to it
            plain = Dbt(required_project, "local", {"cdc_raw_schema": pipeline.target.raw_schema})
            assert failures(plain.build([], False)) == []
            check_marts(pipeline, sim, through[cut_step])
            assert failures(plain.build(["customers_current", "customers_history"], True)) == []
            check_marts(pipeline, sim, through[cut_step])
    # the laggard's last two exports land together: every change is applied, nothing twice
    # the laggard's last export arrives before the one it follows: a gap, the cut stays
    export(ORDER_LINES, 4)
    output, failed = _run(pipeline)
    assert not failed and f"export gap in sales_order_lines: exported through 0x{lsn_hex(through[2])}" in output, output[-2000:]
    check_marts(pipeline, sim, through[2])
    gap_run = pipeline.rows("select manifests_from, run_id from {s}.cdc_runs order by run_id desc limit 1")[0]
    assert gap_run["manifests_from"] == gap_run["run_id"]  # the next run reads manifests from this batch on
    # the missing export lands: the chain closes over both, every change is applied, nothing twice
    export(ORDER_LINES, 3)
    output, failed = _run(pipeline)
    assert not failed and "cut held back" not in output and "WARNING" not in output, output[-2000:]
    check_marts(pipeline, sim, through[4])
    ledger = pipeline.rows("select exported_lsn, manifests_from, refused from {s}.cdc_runs order by run_id")
    assert ledger[-1]["exported_lsn"] == {t.capture_instance: lsn_hex(through[4]) for t in (CUSTOMERS, ORDER_LINES)}
    assert ledger[-1]["manifests_from"] == ""
    assert len(ledger[3]["refused"]) == 4 and ledger[-1]["refused"] == []
