"""runner/run/maintenance.py without Spark (and one scenario of runs and a pass): what a maintenance pass decides per table (retention
properties, compaction past the threshold, VACUUM once a day while removed files may wait, the raw
retention's cut never past what staging took in), the --restage refusal and the overdue warning;
and the pass's reading of maintenance_facts (runner/run/maintain.py)."""

from __future__ import annotations

import io
import uuid
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from cdc_simulator.simulate import Simulator
from runner.errors import UsageError
from runner.project.yaml_edit import edit_yaml
from runner.run import report
from runner.run.dbt import Dbt
from runner.run.maintain import Pass, maintained, plan_pass, read_facts, run_pass, status_table
from runner.run.maintenance import (
    LOG_RETENTION,
    RETENTION,
    Last,
    Settings,
    TableState,
    batch_time,
    hours_of,
    order,
    overdue,
    plan_table,
    raw_cutoff,
    raw_sources,
    restage_refusal,
    wanted_properties,
)
from runner.run.metrics import Metrics
from tests.conftest import EVENT_TABLES, PROJECT_DIR, Pipeline, copy_project
from tests.expected import check_marts
from tests.scenarios import CHANGE_TABLES, land_changes

NOW = datetime(2026, 12, 1, 12, 0, 0)
SET = {RETENTION: "interval 168 hours", LOG_RETENTION: "interval 168 hours"}


def state(files=3, modified="m1", last=None, kind="mart", properties=SET, relation="cdc.customers_current"):
    return TableState(relation, kind, files, 1000 * files, modified, dict(properties), last)


def last(**given):
    fields = {"at": NOW - timedelta(hours=1), "files_after": 3, "compacted_files": 2, "vacuumed_at": NOW - timedelta(hours=2),
              "modified_after": "m1", "removed_through": None}
    return Last(**{**fields, **given})


def test_retention_properties_are_set_once_and_the_log_keeps_what_the_files_keep():
    both = {RETENTION: "interval 168 hours", LOG_RETENTION: "interval 168 hours"}
    assert wanted_properties(Settings(), {}) == both
    # Delta's own forms of the same: nothing to set
    assert wanted_properties(Settings(), {RETENTION: "interval 7 days", LOG_RETENTION: "interval 1 week"}) == {}
    # Delta's 30 days of log come down to the retention (a version older than its files is unreadable)
    assert wanted_properties(Settings(), {RETENTION: "interval 7 days", LOG_RETENTION: "interval 30 days"}) == {
        LOG_RETENTION: "interval 168 hours"}
    assert wanted_properties(Settings(retention_hours=24), SET) == {RETENTION: "interval 24 hours",
                                                                    LOG_RETENTION: "interval 24 hours"}
    # a retention past Delta's 30 days raises the log's with it (Delta refuses a VACUUM otherwise)
    assert wanted_properties(Settings(retention_hours=1000), {}) == {RETENTION: "interval 1000 hours",
                                                                    LOG_RETENTION: "interval 1000 hours"}
    assert wanted_properties(Settings(retention_hours=1000), {RETENTION: "interval 1000 hours",
                                                              LOG_RETENTION: "1000 hours"}) == {}
    assert hours_of("interval 1 week") == 168 and hours_of("2 days 12 hours") == 60 and hours_of("soon") is None
    assert hours_of(None) is None and hours_of("interval 30 minutes") == 0.5


def test_a_table_is_compacted_once_it_holds_the_threshold_more_files_than_after_its_last_compaction():
    settings = Settings(compact_after_files=32)
    assert not plan_table(state(files=33, last=last(compacted_files=2)), settings, NOW).compact
    task = plan_table(state(files=34, last=last(compacted_files=2)), settings, NOW)
    assert task.compact and "34 files, 32 more than after its last compaction" in task.why
    # never compacted: the threshold's files
    assert not plan_table(state(files=31), settings, NOW).compact
    assert plan_table(state(files=32), settings, NOW).why[0] == "32 files, never compacted"
    # a table of many partitions compacts to one file each: the files after it are its baseline
    assert not plan_table(state(files=60, last=last(compacted_files=40)), settings, NOW).compact


def test_vacuum_runs_once_per_interval_while_files_removed_since_the_last_cut_off_may_wait():
    settings = Settings(vacuum_every_hours=24, retention_hours=168)
    # written since its last maintenance (its lastModified moved), vacuumed a day ago: due
    written = state(modified="m2", last=last(vacuumed_at=NOW - timedelta(hours=25)))
    assert plan_table(written, settings, NOW).vacuum
    # vacuumed within the interval: not yet, whatever was written
    assert not plan_table(state(modified="m2", last=last(vacuumed_at=NOW - timedelta(hours=23))), settings, NOW).vacuum
    # untouched since a vacuum that came after its last removals' retention: nothing can wait
    quiet = last(vacuumed_at=NOW - timedelta(days=20), removed_through=NOW - timedelta(days=30))
    assert not plan_table(state(last=quiet), settings, NOW).vacuum
    # untouched since, but files it removed within the retention before that vacuum wait for the next
    waiting = last(vacuumed_at=NOW - timedelta(days=2), removed_through=NOW - timedelta(days=4))
    task = plan_table(state(last=waiting), settings, NOW)
    assert task.vacuum and task.removed_through == waiting.removed_through
    # never vacuumed: due; a compaction removes files now
    task = plan_table(state(files=40, modified="m2", last=last(vacuumed_at=None, compacted_files=None)), settings, NOW)
    assert task.compact and task.vacuum and task.removed_through == NOW
    assert plan_table(state(last=last()), settings, NOW).empty


def test_the_raw_retention_deletes_of_each_source_only_the_batches_its_staging_took_in():
    tables = [("customers", "change_tables", ["dbo_Customers", "dbo_customers_v2"]), ("employees", "ces", []),
              ("orders", "change_tables", ["dbo_orders"])]
    marks = {"stg_cdc_metadata__lsn_time_mapping": "b9", "stg_cdc_metadata__change_tables": "b1",
             "stg_cdc_metadata__captured_columns": "b3", "stg_ces__events": "b8", "stg_change_tables__customers": "b7"}
    sources = {(s.kind, s.entities): s.through for s in raw_sources(tables, marks)}
    assert sources == {
        ("cdc_metadata", ("lsn_time_mapping",)): "b9",
        ("cdc_metadata", ("captured_columns",)): "b3",
        # read by two models: as far as the one behind
        ("cdc_metadata", ("change_tables",)): "b1",
        ("ces", None): "b8",
        ("change_tables", ("dbo_customers",)): "b7", ("change_tables", ("dbo_customers_v2",)): "b7",
        ("snapshots", ("customers",)): "b7",
        # a staging model that took in nothing yet
        ("change_tables", ("dbo_orders",)): "", ("snapshots", ("orders",)): ""}
    assert raw_cutoff(Settings(), NOW, raw_sources(tables, marks)) is None  # off by default
    days = Settings(raw_retention_days=7)
    cut = raw_cutoff(days, NOW, raw_sources(tables, marks))
    assert cut.before == "20261124T120000000000Z" and {s.through for s in cut.sources} == {"b9", "b3", "b1", "b8", "b7"}
    assert raw_cutoff(days, NOW, raw_sources([], {})) is None  # nothing staged: nothing goes
    # a manifest waiting beyond an export gap is read again by a later run
    assert raw_cutoff(days, NOW, raw_sources(tables, marks), "20261101T000000000000Z-c").before == "20261101T000000000000Z-c"
    # the raw table's cut goes with its VACUUM (once an interval), not every pass
    raw = state(kind="raw", relation="cdc_raw.landed_rows", modified="m2", last=last(vacuumed_at=NOW - timedelta(days=2)))
    task = plan_table(raw, days, NOW, cut)
    assert task.raw == cut and task.vacuum and task.why[-1] == ("raw retention: the landed rows of batches before "
                                                               "20261124T120000000000Z that their staging models took in")
    assert plan_table(state(kind="mart", modified="m2", last=last(vacuumed_at=NOW - timedelta(days=2))), days, NOW,
                      cut).raw is None
    assert plan_table(state(kind="raw", last=last(vacuumed_at=NOW - timedelta(hours=1))), days, NOW, cut).raw is None


def test_restage_is_refused_once_the_raw_retention_deleted_rows_naming_the_oldest_batch_held():
    assert restage_refusal(None, 7) is None
    refusal = restage_refusal("20261124T120000000000Z-abc123", 7)
    assert "the oldest batch it can rebuild from is 20261124T120000000000Z-abc123" in refusal
    assert "raw_retention_days: 7" in refusal and "--full-refresh rebuilds the marts" in refusal


def test_the_summary_warns_when_no_maintenance_ran_for_the_overdue_hours():
    settings = Settings(overdue_hours=48)
    assert overdue(settings, NOW, NOW - timedelta(hours=47), NOW - timedelta(days=9)) is None
    line = overdue(settings, NOW, NOW - timedelta(hours=50), NOW - timedelta(days=9))
    assert line.startswith("WARNING maintenance overdue: the last maintenance ran 2d02h ago")
    assert "python -m runner maintain" in line
    assert overdue(settings, NOW, None, NOW - timedelta(hours=10)) is None  # a young warehouse
    assert "no maintenance ran since the first run, 3d00h ago" in overdue(settings, NOW, None, NOW - timedelta(days=3))
    assert batch_time("20261201T120000000000Z-abc") == NOW and batch_time("") is None


def test_a_pass_maintains_the_tables_with_work_most_files_first_and_reads_what_the_macro_reports():
    relations = maintained(PROJECT_DIR, "cdc_raw")
    assert relations[0] == {"relation": "cdc_raw.landed_rows", "kind": "raw"}
    assert {"relation": "stg_ces__events", "kind": "staging"} in relations
    assert {"relation": "customers_history", "kind": "mart"} in relations
    assert [r["kind"] for r in relations[-3:]] == ["ledger", "watermarks", "maintenance"]
    report = {"tables": [
        {"relation": "cdc.a_current", "kind": "mart", "files": 40, "bytes": 4000, "modified": "2026-12-01 10:00:00",
         "properties": SET, "last": None},
        {"relation": "cdc.b_current", "kind": "mart", "files": 90, "bytes": 9000, "modified": "x", "properties": {},
         "last": {"at": "2026-12-01T11:00:00.000Z", "files_after": 2, "compacted_files": 2,
                  "vacuumed_at": "2026-12-01T11:00:00.000Z", "modified_after": "x", "removed_through": None,
                  "reclaimable": 512}},
        {"relation": "cdc.c_current", "kind": "mart", "files": 2, "bytes": 10, "modified": "y", "properties": SET,
         "last": {"at": "2026-12-01T11:00:00.000Z", "files_after": 2, "compacted_files": 2,
                  "vacuumed_at": "2026-12-01T11:00:00.000Z", "modified_after": "y", "removed_through": None}}],
        "staged_through": {}, "staging": [], "first_run": "20261101T000000000000Z-a", "manifests_from": "",
        "last_maintained": "2026-12-01T11:00:00.000Z"}
    facts = read_facts(report)
    assert facts.tables["cdc.b_current"].last.reclaimable == 512 and facts.first_run == datetime(2026, 11, 1)
    tasks = plan_pass(facts, Settings(), NOW, [])
    assert [t.relation for t in tasks] == ["cdc.b_current", "cdc.a_current"]  # c has nothing to do
    assert order(tasks, facts.tables) == tasks
    table = status_table(Pass(facts, tasks))
    assert [r["table"] for r in table.rows] == ["cdc.a_current", "cdc.b_current", "cdc.c_current"]
    assert table.rows[2]["due"] == "-" and table.rows[1]["reclaimable"] == "512 B"


@pytest.mark.parametrize("given", [{"compact_after_files": 1}, {"retention_hours": -1}, {"raw_retention_days": 0},
                                   {"unknown": 1}])
def test_bad_maintenance_settings_are_refused_naming_the_field(tmp_path, given):
    import yaml

    from runner.project.config import maintenance_settings

    (tmp_path / "dbt_project.yml").write_text(yaml.safe_dump({"vars": {"cdc_maintenance": given}}))
    with pytest.raises(UsageError, match=r"var cdc_maintenance: .*" + next(iter(given))):
        maintenance_settings(tmp_path)


MARTS = [f"{t.name}_{mart}" for t in CHANGE_TABLES for mart in ("current", "history")]


def _detail(pipeline, relation: str) -> dict:
    return pipeline.rows(f"describe detail {relation}")[0]


def _files_on_disk(location: str) -> int:
    """The data files and deletion vectors in a table's folder (not its log)."""
    root = Path(location.removeprefix("file:"))
    return sum(1 for p in root.rglob("*") if p.is_file() and "_delta_log" not in p.parts and not p.name.startswith("."))


@pytest.mark.scenario
def test_a_pass_compacts_vacuums_applies_the_raw_retention_and_the_next_run_is_exact(spark, tmp_path, capfd):
    """Costs three runs, a pass, a refused restage and one more run (about 60 s on two cores);
    proves what a pass does to a warehouse that runs made: the marts compacted and their
    deletion vectors purged, every removed file vacuumed (retention 0), the ledger's and the
    metrics' figures those of DESCRIBE DETAIL, time travel refused beyond the retention, the raw
    retention deleting staged batches but no landed-file record, --restage refused, and the next
    run landing nothing twice and applying its batch exactly; and nothing on the console but the
    pass's own lines (Delta prints each VACUUM's count on the JVM's standard output)."""
    project = copy_project(tmp_path / "project", {}, drop=EVENT_TABLES)
    settings = {"compact_after_files": 2, "retention_hours": 0, "vacuum_every_hours": 0.0001,
                "raw_retention_days": 0.00001, "overdue_hours": 0.0001}
    edit_yaml(project / "dbt_project.yml", lambda doc: doc["vars"].update({"cdc_maintenance": settings}) or True)
    (tmp_path / "landing").mkdir()
    pipeline = Pipeline(spark, "m_" + uuid.uuid4().hex[:8], tmp_path / "landing", project_dir=project)
    raw = f"{pipeline.target.raw_schema}.landed_rows"
    sim = Simulator(CHANGE_TABLES, seed=47)
    said = io.StringIO()
    for i in range(3):
        land_changes(pipeline, sim, sim.run(12), f"b{i + 1}", first=i == 0)
        pipeline.run(progress=report.Progress(stream=said))
    # no pass ran, and the first run is older than overdue_hours: the summary says so
    assert "WARNING maintenance overdue: no maintenance ran since the first run" in said.getvalue()
    history = f"{pipeline.schema}.customers_history"
    assert pipeline.rows(f"select count(*) as n from {history} version as of 1")[0]["n"] > 0  # Delta's 7 days
    before = {m: _detail(pipeline, f"{pipeline.schema}.{m}")["numFiles"] for m in MARTS}
    assert all(n >= settings["compact_after_files"] for n in before.values()), before
    records = pipeline.rows(f"select count(*) as n from {raw} where landing_kind = 'landed_files'")[0]["n"]
    landed = pipeline.rows(f"select count(*) as n from {raw} where landing_kind = 'change_tables'")[0]["n"]

    dbt = Dbt(project, "local", {"cdc_raw_schema": pipeline.target.raw_schema})
    result = run_pass(dbt, project, pipeline.target.raw_schema, report.Progress(stream=said))
    done = {row["relation"]: row for row in result.done}
    assert "files and directories in a total of" not in capfd.readouterr().out
    metrics = Metrics()
    metrics.maintained(result, 1.0)
    sample = metrics.registry.get_sample_value
    for mart in MARTS:
        relation = f"{pipeline.schema}.{mart}"
        detail, row = _detail(pipeline, relation), done[relation]
        # the ledger's and the metrics' figures are DESCRIBE DETAIL's
        assert (row["files_after"], row["bytes_after"]) == (detail["numFiles"], detail["sizeInBytes"])
        assert sample("sqlserver_cdc_table_files", {"relation": relation}) == detail["numFiles"]
        assert sample("sqlserver_cdc_table_bytes", {"relation": relation}) == detail["sizeInBytes"]
        assert row["compacted"] and row["compaction_files_removed"] == before[mart] and detail["numFiles"] == 1
        # retention 0: VACUUM deleted every file the compaction and the runs removed
        assert row["vacuumed"] and row["vacuum_files_deleted"] > 0 and _files_on_disk(detail["location"]) == 1
        assert sample("sqlserver_cdc_table_reclaimable_bytes", {"relation": relation}) == 0
        # the log keeps its commits as long as the files are kept (Delta's default: 30 days)
        properties = _detail(pipeline, relation)["properties"]
        assert properties["delta.deletedFileRetentionDuration"] == properties["delta.logRetentionDuration"] == "interval 0 hours"
    assert any(done[f"{pipeline.schema}.{m}"]["deletion_vectors_purged"] for m in MARTS if m.endswith("_current"))
    assert pipeline.rows(f"select count(*) as n from {pipeline.schema}.cdc_maintenance")[0]["n"] == len(result.done)
    # time travel beyond the retention is refused by name
    with pytest.raises(Exception, match="DELTA_UNSUPPORTED_TIME_TRAVEL_BEYOND_DELETED_FILE_RETENTION_DURATION"):
        spark.sql(f"select count(*) from {history} version as of 1").collect()
    # the raw retention: the staged batches' landed rows gone, every landed-file record kept
    assert 0 < done[raw]["raw_rows_deleted"] and done[raw]["raw_held_from"]
    assert pipeline.rows(f"select count(*) as n from {raw} where landing_kind = 'change_tables'")[0]["n"] < landed
    assert pipeline.rows(f"select count(*) as n from {raw} where landing_kind = 'landed_files'")[0]["n"] == records
    with pytest.raises(UsageError, match=f"the oldest batch it can rebuild from is {done[raw]['raw_held_from']}"):
        pipeline.run(restage=True)
    # the landing folder still holds every file: none lands twice, and the next batch applies exactly
    txs = sim.run(12)
    land_changes(pipeline, sim, txs, "b4")
    summary = pipeline.run()
    assert sum(r["rows_landed"] for r in summary) == sum(len(tx.changes.get(t.name, [])) for tx in txs for t in CHANGE_TABLES)
    check_marts(pipeline, sim, txs[-1].commit_lsn)
