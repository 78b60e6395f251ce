"""runner/run/maintenance.py without Spark: what a maintenance pass decides per table (retention
properties, compaction past the threshold, VACUUM once a day while removed files may wait, the raw
retention's cut never past what staging took in), the --restage refusal and the overdue warning;
and the pass's reading of maintenance_facts (runner/run/maintain.py)."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from runner.run.maintain import maintained, plan_pass, read_facts, status_table
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
from tests.conftest import PROJECT_DIR

NOW = datetime(2026, 12, 1, 12, 0, 0)
SET = {RETENTION: "interval 168 hours"}


def state(files=3, modified="m1", last=None, kind="mart", properties=SET, relation="cdc.customers_current"):
    return TableState(relation, kind, files, 1000 * files, modified, dict(properties), last)


def last(**given):
    fields = {"at": NOW - timedelta(hours=1), "files_after": 3, "compacted_files": 2, "vacuumed_at": NOW - timedelta(hours=2),
              "modified_after": "m1", "removed_through": None}
    return Last(**{**fields, **given})


def test_retention_properties_are_set_once_and_a_long_retention_raises_the_log_retention_with_it():
    assert wanted_properties(Settings(), {}) == {RETENTION: "interval 168 hours"}
    assert wanted_properties(Settings(), {RETENTION: "interval 7 days"}) == {}  # Delta's own form of the same
    assert wanted_properties(Settings(retention_hours=24), SET) == {RETENTION: "interval 24 hours"}
    # Delta refuses a VACUUM whose file retention outlasts the log's (30 days by default)
    assert wanted_properties(Settings(retention_hours=1000), {}) == {RETENTION: "interval 1000 hours",
                                                                    LOG_RETENTION: "interval 1000 hours"}
    assert wanted_properties(Settings(retention_hours=1000), {RETENTION: "interval 1000 hours",
                                                              LOG_RETENTION: "interval 60 days"}) == {}
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
    from runner.run.maintain import Pass

    table = status_table(Pass(facts, tasks))
    assert [r["table"] for r in table.rows] == ["cdc.a_current", "cdc.b_current", "cdc.c_current"]
    assert table.rows[2]["due"] == "-" and table.rows[1]["reclaimable"] == "512 B"


@pytest.mark.parametrize("given", [{"compact_after_files": 1}, {"retention_hours": -1}, {"raw_retention_days": 0},
                                   {"unknown": 1}])
def test_bad_maintenance_settings_are_refused_naming_the_field(tmp_path, given):
    import yaml

    from runner.errors import UsageError
    from runner.project.config import maintenance_settings

    (tmp_path / "dbt_project.yml").write_text(yaml.safe_dump({"vars": {"cdc_maintenance": given}}))
    with pytest.raises(UsageError, match=r"var cdc_maintenance: .*" + next(iter(given))):
        maintenance_settings(tmp_path)
