"""runner/run/plan.py without Spark: every rule a run's plan decides (bounds per channel, the export
cut, lagging and dropped capture instances, snapshots, gaps, what to build, nothing to do, event
routing, Kafka-landed events) and how the watermarks move after the build."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from runner.run.plan import (
    BuildCommand,
    Facts,
    Landed,
    Manifest,
    NodeResult,
    Options,
    PreviousRun,
    Retention,
    Seed,
    Snapshot,
    Table,
    Watermark,
    advance,
    batch_id,
    dbt_build,
    event_arrivals,
    export_cut,
    facts_from_report,
    lsn_increment,
    plain_windows,
    plan_run,
    report_keys,
    retention,
)
from runner.run.report import headroom_warnings, landing_lines
from runner.sources import landing

CUSTOMERS = Table("customers", "change_tables", (("dbo_customers", False),), "d1")
ORDERS = Table("orders", "change_tables", (("dbo_orders", False),), "d2")
EMPLOYEES = Table("employees", "ces", (), "d3")
PRODUCTS = Table("products", "debezium", (), "d4")
ALL = (CUSTOMERS, ORDERS, EMPLOYEES, PRODUCTS)
SHARED = ("stg_cdc_metadata__lsn_time_mapping", "stg_cdc_metadata__change_tables", "stg_cdc_metadata__captured_columns",
          "stg_ces__events", "stg_debezium__events", "cdc_quarantine", "cdc_operations", "sqlserver_types")
SEEDS = {"cdc_operations": Seed("cdc_operations", "c1"), "sqlserver_types": Seed("sqlserver_types", "t1")}


def report(**given) -> dict:
    """A report of begin_run with every key its schema has (plan.report_keys), empty unless given."""
    empty = {"run_id": "b2", "tables": [], "previous": None, "landed_now": {}, "arrived": {}, "event_arrivals": [],
             "manifests": [], "snapshots": [], "watermarks": {}, "relations": [],
             "instance_min_lsn": {}, "views_digest": "", "seeds": {}, "audit_tagged": False,
             "late_commit_times": {}, "cdc_jobs_retention": {}, "database_names": {}, "captured_columns": []}
    return {**empty, **given}


def test_a_report_whose_keys_are_not_the_facts_schema_is_refused_naming_them():
    assert set(report()) == report_keys()
    with pytest.raises(ValueError, match=r"missing: arrived; unknown: arived\)"):
        facts_from_report({**{k: v for k, v in report().items() if k != "arrived"}, "arived": {}})


def lsn(n: int) -> str:
    return f"{0x2C_00000300_0000 + n:020X}"


def relations(*tables: Table) -> frozenset[str]:
    return frozenset(SHARED) | {m for t in tables for m in (t.staging, *t.marts)}


def settled(*tables: Table, upper: int = 10, batch: str = "b1") -> dict[str, Watermark]:
    """The watermarks after a successful run that took every table to `upper` in batch `batch`."""
    marks = {m: Watermark(batch=batch) for m in SHARED[:5]}
    marks["cdc_quarantine"] = Watermark(batch=batch, declaration="v")
    for t in tables:
        marks[t.staging] = Watermark(batch=batch)
        for m in t.marts:
            marks[m] = Watermark(lsn(upper), batch if t.channel != "change_tables" else None, t.digest)
    return marks


def previous(upper: int = 10, batch: str = "b1", **kw) -> PreviousRun:
    landed = {"cdc_metadata/lsn_time_mapping": Landed(lsn(upper), batch), "ces": Landed(lsn(upper), batch),
              "debezium": Landed(lsn(upper), batch)}
    return PreviousRun(batch, {**landed, **kw.pop("landed", {})}, **kw)


def facts(run_id: str = "b2", tables=ALL, **kw) -> Facts:
    kw.setdefault("relations", relations(*tables))
    kw.setdefault("watermarks", settled(*tables))
    kw.setdefault("previous", previous())
    kw.setdefault("views_digest", "v")
    return Facts(run_id=run_id, tables=tuple(tables), **kw)


def arrived(**sources: tuple[int, int]) -> dict[str, Landed]:
    """Arrivals keyed like Facts.arrived ('__' for '/', '_at_' for ':'), each (min, max) LSN, batch b2."""
    out = {}
    for key, (low, high) in sources.items():
        out[key.replace("__", "/").replace("_at_", ":")] = Landed(lsn(high), "b2", lsn(low))
    return out


def test_first_run_builds_everything_up_to_what_landed():
    f = facts("b1", previous=None, watermarks={}, relations=frozenset(), seeds=SEEDS,
              arrived=arrived(cdc_metadata__lsn_time_mapping=(1, 10), change_tables__dbo_customers=(1, 9), ces=(2, 8),
                              ces_at_employees=(2, 8), debezium=(1, 7), debezium_at_products=(1, 7)))
    p = plan_run(f)
    assert p.status == "build" and p.seeds == {"cdc_operations": "c1", "sqlserver_types": "t1"}
    assert p.upper_lsn == {"change_tables": lsn(10), "ces": lsn(8), "debezium": lsn(7)}
    assert p.upper_batch == {"ces": "b2", "debezium": "b2"}
    assert set(p.build) == {m for t in ALL for m in (t.staging, *t.marts)} | set(SHARED[:6])
    assert all(p.models[m].full for t in ALL for m in t.marts)
    assert p.models["customers_history"].lower_lsn == "" and p.models["customers_history"].upper_lsn == lsn(10)


def test_the_batch_id_is_the_clocks_unless_the_last_batch_is_not_before_it():
    clock = "20261125T144641017837Z-a0c8d5"
    assert batch_id(clock, "") == clock  # a new warehouse
    assert batch_id(clock, "20261125T144641017836Z-ffffff") == clock
    # the clock stepped back behind the last batch recorded or landed, or stands on it: one
    # microsecond after it, with the clock's suffix; across a second, a day and a year too
    assert batch_id(clock, "20261125T154641017837Z-111111") == "20261125T154641017838Z-a0c8d5"
    assert batch_id(clock, "20261125T144641017837Z-ffffff") == "20261125T144641017838Z-a0c8d5"
    assert batch_id(clock, "20261231T235959999999Z-111111") == "20270101T000000000000Z-a0c8d5"
    assert batch_id(clock, clock) > clock


def test_a_plain_dbt_build_takes_what_the_last_run_left_or_a_rebuild_up_to_its_bound():
    """The windows the ledger's plan keeps for a plain dbt build (macro cdc_window reads them):
    a mart the run took to its bound has nothing left; one whose build failed gets the run's
    window again; a full refresh rebuilds up to the bound, a change-table mart from the newest
    snapshot at or below it."""
    f = facts(arrived=arrived(cdc_metadata__lsn_time_mapping=(11, 20), change_tables__dbo_customers=(12, 19),
                              snapshots__orders=(15, 15)),
              snapshots=(Snapshot("orders", lsn(15), "b2"), Snapshot("orders", lsn(25), "b2")))
    p = plan_run(f)
    results = [NodeResult(m, "model", "error" if m == "customers_history" else "success") for m in p.build]
    out = advance(p, f, results)
    plain = plain_windows(p, out)
    assert set(plain) == {m for t in ALL for m in t.marts}
    # failed: the run's window again, nothing decided anew
    assert plain["customers_history"]["remaining"] == {"full": False, "kind": "mart", "table": "customers",
                                                       "lower_lsn": lsn(10), "upper_lsn": lsn(20), "evolve": True}
    # at the bound (built, or nothing in its window): an empty window there
    for mart in ("customers_current", "employees_current", "products_history"):
        window = plain[mart]["remaining"]
        mark = out.watermarks[mart]
        assert (window["full"], window.get("lower_lsn"), window.get("upper_lsn"), window.get("lower_batch"),
                window.get("upper_batch")) == (False, mark.lsn, mark.lsn, mark.batch, mark.batch), mart
    assert plain["customers_current"]["remaining"]["upper_lsn"] == lsn(20)
    # a full refresh: from scratch up to the bound, from the newest snapshot at or below it
    assert plain["orders_current"]["full"] == {"kind": "mart", "table": "orders", "full": True, "lower_lsn": lsn(15),
                                               "upper_lsn": lsn(20), "snapshot_lsn": lsn(15), "evolve": True}
    assert plain["customers_current"]["full"] == {"kind": "mart", "table": "customers", "full": True,
                                                  "upper_lsn": lsn(20), "evolve": True}
    assert "snapshot_lsn" not in plain["employees_history"]["full"]
    # the ledger keeps them with the plan
    assert json.loads(p.to_json(out))["plain"] == plain


def test_the_dbt_build_a_plan_makes():
    """What the run's dbt build selects: nothing when nothing is due; the plan's models and the seeds
    due, without the audit tests and the loaded seeds (no schema listing for staging and marts);
    with a full refresh the whole project, audits included; with --select what the user chose."""
    seeds = {**SEEDS, "sqlserver_types": Seed("sqlserver_types", "t2")}  # its file changed
    settled_marks = {**settled(*ALL), "cdc_operations": Watermark(declaration="c1"),
                     "sqlserver_types": Watermark(declaration="t1")}
    quiet = facts(previous=previous(), seeds=SEEDS, watermarks=settled_marks)
    assert plan_run(quiet).status == "nothing_to_do" and dbt_build(plan_run(quiet), quiet) is None
    batch = facts(arrived=arrived(cdc_metadata__lsn_time_mapping=(11, 20), change_tables__dbo_customers=(12, 19)),
                  seeds=seeds, watermarks=settled_marks)
    p = plan_run(batch)
    command = dbt_build(p, batch)
    assert command.select == (*p.build, "sqlserver_types") and "customers_current" in command.select
    assert command.exclude == ("cdc_operations",) and not command.full_refresh  # no audit test: no selector
    audited = replace(batch, audit_tagged=True)
    assert dbt_build(plan_run(audited), audited).exclude == ("tag:cdc_audit", "cdc_operations")
    assert command.populate_cache  # a seed loads: dbt's seed materialization looks its table up
    p = plan_run(batch, Options(full_refresh=True))
    assert dbt_build(p, batch) == BuildCommand((), ("cdc_operations",), True, True)
    p = plan_run(audited, Options(select=("customers_current",)))
    assert dbt_build(p, audited) == BuildCommand(("customers_current",), ("tag:cdc_audit",), False, True)
    # an arrival that changes no table's window and no seed due: no build
    late = facts(arrived=arrived(snapshots__nothing=(3, 3)), seeds=SEEDS, watermarks=settled_marks)
    assert plan_run(late).status == "build" and dbt_build(plan_run(late), late) is None
    only_marts = facts(arrived=arrived(cdc_metadata__lsn_time_mapping=(11, 20), change_tables__dbo_customers=(12, 19)),
                       seeds=SEEDS, watermarks=settled_marks)
    assert not dbt_build(plan_run(only_marts), only_marts).populate_cache


def test_a_batch_on_one_table_builds_that_table_only_and_the_others_move_to_the_bound():
    f = facts(arrived=arrived(cdc_metadata__lsn_time_mapping=(11, 20), change_tables__dbo_customers=(12, 19)))
    p = plan_run(f)
    assert p.upper_lsn["change_tables"] == lsn(20)
    assert p.tables["customers"].apply and p.tables["customers"].stage
    assert not p.tables["orders"].apply and not p.tables["orders"].stage
    assert not p.tables["employees"].apply and not p.tables["products"].apply
    assert sorted(p.build) == ["customers_current", "customers_history", "stg_cdc_metadata__lsn_time_mapping",
                               "stg_change_tables__customers"]
    window = p.models["customers_current"]
    assert (window.lower_lsn, window.upper_lsn, window.full, window.evolve) == (lsn(10), lsn(20), False, False)
    # the staging window: the batches after the last one it took in, and the LSN range its checks read
    staging = p.models["stg_change_tables__customers"]
    assert (staging.from_batch, staging.through_batch, staging.lower_lsn, staging.upper_lsn) == ("b1", "b2", lsn(12), lsn(19))
    results = [NodeResult(m, "model", "success") for m in p.build] + [
        NodeResult("tracked_table_checks_customers", "test", "pass", ("stg_change_tables__customers", *CUSTOMERS.marts))]
    out = advance(p, f, results)
    assert out.status == "succeeded" and out.failed == []
    assert out.watermarks["customers_current"] == Watermark(lsn(20), None, "d1")
    assert out.watermarks["orders_current"] == Watermark(lsn(20), None, "d2")  # moved without a build
    assert out.watermarks["stg_change_tables__customers"].batch == "b2"
    assert out.watermarks["stg_change_tables__orders"].batch == "b1"
    assert out.watermarks["employees_current"] == Watermark(lsn(10), "b1", "d3")  # its channel's bound did not move
    assert out.advanced["orders_current"] and out.advanced["customers_history"]
    assert out.built == set(p.build)


def test_a_failed_check_holds_its_tables_marts_and_the_next_run_applies_them_again():
    f = facts(arrived=arrived(cdc_metadata__lsn_time_mapping=(11, 20), change_tables__dbo_customers=(12, 19)))
    p = plan_run(f)
    results = [NodeResult(m, "model", "success") for m in p.build] + [
        NodeResult("checks", "test", "fail", ("stg_change_tables__customers", *CUSTOMERS.marts), "Got 1 result")]
    out = advance(p, f, results)
    assert out.status == "failed" and out.failed == ["test checks: fail - Got 1 result"]
    assert out.watermarks["customers_current"] == Watermark(lsn(10), None, "d1")
    assert out.watermarks["stg_change_tables__customers"].batch == "b2"  # staged: not staged twice
    assert not out.advanced["customers_current"] and out.advanced["orders_current"]
    # the next run: nothing new landed, but customers is behind its bound: applied again
    landed = {**previous().landed, "cdc_metadata/lsn_time_mapping": Landed(lsn(20), "b2"),
              "change_tables/dbo_customers": Landed(lsn(19), "b2")}
    nxt = plan_run(facts("b3", watermarks=out.watermarks, previous=PreviousRun("b2", landed)))
    assert nxt.tables["customers"].apply and not nxt.tables["customers"].stage
    assert nxt.build == ["customers_history", "customers_current"]


def test_a_staging_model_left_behind_by_a_failed_run_is_built_again():
    landed = {**previous().landed, "cdc_metadata/lsn_time_mapping": Landed(lsn(20), "b2"),
              "change_tables/dbo_orders": Landed(lsn(15), "b2")}
    f = facts("b3", previous=PreviousRun("b2", landed))
    p = plan_run(f)
    assert p.tables["orders"].stage and p.tables["orders"].apply
    assert p.models["stg_change_tables__orders"].from_batch == "b1"


def test_upper_lsn_option_caps_every_channel_and_watermarks_never_go_back():
    f = facts(arrived=arrived(cdc_metadata__lsn_time_mapping=(11, 20), change_tables__dbo_customers=(12, 19)))
    p = plan_run(f, Options(upper_lsn=lsn(15)))
    assert p.upper_lsn == {"change_tables": lsn(15), "ces": lsn(15), "debezium": lsn(15)}
    assert p.tables["customers"].apply
    below = plan_run(f, Options(upper_lsn=lsn(5)))
    assert not below.tables["customers"].apply
    out = advance(below, f, [NodeResult(m, "model", "success") for m in below.build])
    assert out.watermarks["customers_current"].lsn == lsn(10)


def test_export_cut_follows_the_chain_of_manifests_and_the_laggard_holds_it():
    tables = (CUSTOMERS, ORDERS)
    manifests = (Manifest("dbo_customers", None, lsn(10), "b1"), Manifest("dbo_customers", lsn(10), lsn(20), "b2"),
                 Manifest("dbo_orders", None, lsn(12), "b2"))
    cut = export_cut(tables, manifests, {}, lsn(25), False)
    assert cut.exported == {"dbo_customers": lsn(20), "dbo_orders": lsn(12)}
    assert cut.cut == lsn(12)
    assert cut.held_back == {"table": "orders", "capture_instance": "dbo_orders", "exported_lsn": lsn(12),
                             "captured_lsn": lsn(25)}
    assert cut.gaps == [] and cut.manifests_from == "" and cut.without_manifest == []
    # an export landing before the one it follows: a gap, the chain stops below it
    gap = export_cut(tables, (Manifest("dbo_orders", lsn(20), lsn(30), "b3"),), cut.exported, lsn(35), False)
    assert gap.exported["dbo_orders"] == lsn(12) and gap.cut == lsn(12)
    assert gap.gaps == [f"dbo_orders: exported through 0x{lsn(12)}, the next landed export starts after 0x{lsn(20)}"]
    assert gap.manifests_from == "b3"
    closed = export_cut(tables, (Manifest("dbo_orders", lsn(20), lsn(30), "b3"), Manifest("dbo_orders", lsn(12), lsn(20), "b4")),
                        gap.exported, lsn(35), False)
    assert closed.exported["dbo_orders"] == lsn(30) and closed.cut == lsn(20) and closed.gaps == []


def test_without_manifests_a_table_follows_the_mapping_unless_they_are_required():
    optional = export_cut((CUSTOMERS, ORDERS), (Manifest("dbo_customers", None, lsn(10), "b1"),), {}, lsn(20), False)
    assert optional.cut == lsn(10) and optional.without_manifest == ["dbo_orders"]
    required = export_cut((CUSTOMERS, ORDERS), (Manifest("dbo_customers", None, lsn(10), "b1"),), {}, lsn(20), True)
    assert required.cut == "" and required.held_back["table"] == "orders"
    # required and nothing exported yet: no change-table mart takes anything
    f = facts(arrived=arrived(cdc_metadata__lsn_time_mapping=(11, 20), change_tables__dbo_customers=(12, 19)))
    p = plan_run(f, Options(manifests_required=True))
    assert p.upper_lsn["change_tables"] is None and not p.tables["customers"].apply
    assert p.upper_lsn["ces"] == lsn(10)


def test_a_dropped_capture_instance_stops_holding_the_cut():
    members = Table("members", "change_tables", (("dbo_members_v1", True), ("dbo_members_v2", False)), "d5")
    exported = {"dbo_members_v1": lsn(8), "dbo_members_v2": lsn(20)}
    assert export_cut((members,), (), exported, lsn(25), False).cut == lsn(20)
    # while both run side by side (neither dropped), the one reaching less holds it
    both = Table("members", "change_tables", (("dbo_members_v1", False), ("dbo_members_v2", False)), "d5")
    cut = export_cut((both,), (), exported, lsn(25), False)
    assert cut.cut == lsn(8) and cut.held_back["capture_instance"] == "dbo_members_v1"
    # only the dropped one has manifests: its reach
    assert export_cut((members,), (), {"dbo_members_v1": lsn(8)}, lsn(25), False).cut == lsn(8)
    # its staging takes in both instances' folders
    assert members.sources == ["change_tables/dbo_members_v1", "change_tables/dbo_members_v2", "snapshots/members"]


def test_a_snapshot_above_both_watermarks_reconciles_and_a_stale_one_is_named():
    snap = Snapshot("customers", lsn(15), "b2")
    f = facts(arrived=arrived(cdc_metadata__lsn_time_mapping=(11, 20), snapshots__customers=(0, 0)), snapshots=(snap,))
    p = plan_run(f)
    w = p.models["customers_history"]
    assert p.tables["customers"].apply and (w.snapshot_lsn, w.reconcile, w.lower_lsn) == (lsn(15), True, lsn(15))
    assert p.stale_snapshots == []
    stale = plan_run(facts(arrived=arrived(snapshots__customers=(0, 0)), snapshots=(Snapshot("customers", lsn(5), "b2"),)))
    assert stale.stale_snapshots == [(f"customers: the snapshot at 0x{lsn(5)} is at or below its marts' watermark "
                                      f"0x{lsn(10)}, so it is never applied; land one taken later")]
    assert stale.models["customers_history"].snapshot_lsn is None
    # a rebuild starts from the newest snapshot at or below the bound, without reconciling
    rebuilt = plan_run(f, Options(full_refresh=True))
    w = rebuilt.models["customers_current"]
    assert (w.full, w.snapshot_lsn, w.reconcile, w.lower_lsn) == (True, lsn(15), False, lsn(15))
    assert rebuilt.tables["customers"].latest_snapshot == lsn(15)


def test_cleanup_beyond_the_watermark_stops_the_table_with_the_remedy_and_the_others_go_on():
    f = facts(arrived=arrived(cdc_metadata__lsn_time_mapping=(11, 20), change_tables__dbo_customers=(14, 19),
                              change_tables__dbo_orders=(12, 19)),
              instance_min_lsn={"dbo_customers": lsn(14), "dbo_orders": lsn(11)})
    p = plan_run(f)
    assert not p.tables["customers"].apply and p.tables["orders"].apply
    assert p.tables["customers"].gap.startswith(f"gap detected for tracked table customers: its marts need changes from "
                                                f"LSN {lsn(11)} but capture instance dbo_customers now starts at {lsn(14)}")
    assert "Land a snapshot of customers taken at or after LSN " + lsn(13) in p.tables["customers"].gap
    out = advance(p, f, [NodeResult(m, "model", "success") for m in p.build])
    assert out.status == "failed" and out.failed[0].startswith("table customers: gap detected")
    assert out.watermarks["customers_current"].lsn == lsn(10) and out.watermarks["orders_current"].lsn == lsn(20)
    # a snapshot taken after the cleanup starts the window: no gap
    fixed = plan_run(facts(arrived=arrived(cdc_metadata__lsn_time_mapping=(11, 20), change_tables__dbo_customers=(14, 19)),
                           instance_min_lsn={"dbo_customers": lsn(14)}, snapshots=(Snapshot("customers", lsn(13), "b2"),)))
    assert fixed.tables["customers"].apply and fixed.tables["customers"].gap is None
    assert lsn_increment("FFFFFFFFFFFFFFFFFFFF") is None and lsn_increment(lsn(1)) == lsn(2)


def test_a_refused_export_holds_its_tables_marts_until_a_whole_copy_lands_or_it_is_removed():
    """A refused file of a capture instance (cut short, columns missing, a path Spark cannot read)
    holds that table's marts: were they to move past the changes it holds, its whole copy would
    land below their watermark and never apply. Other tables go on; a refused snapshot or event
    file holds nothing (snapshots land whole with their manifest; events apply below the mark)."""
    refused = ("change_tables/DBO_Customers/e4.parquet: not a whole Parquet file",
               "change_tables/dbo_customers/at 12:05.csv: its path holds ':'",
               "snapshots/orders/s.csv: not a whole Parquet file", "ces/x.jsonl: cut short")
    f = facts(arrived=arrived(cdc_metadata__lsn_time_mapping=(11, 20), change_tables__dbo_customers=(11, 19),
                              change_tables__dbo_orders=(12, 19)), refused=refused)
    p = plan_run(f)
    assert not p.tables["customers"].apply and p.tables["orders"].apply
    assert p.tables["customers"].gap.startswith("tracked table customers waits: change_tables/DBO_Customers/e4.parquet "
                                                "(and 1 more) was refused")
    assert "Remedy it as that line says, or remove it" in p.tables["customers"].gap
    assert p.tables["orders"].gap is None and p.tables["employees"].gap is None
    out = advance(p, f, [NodeResult(m, "model", "success") for m in p.build])
    assert out.status == "failed" and out.failed == [f"table customers: {p.tables['customers'].gap}"]
    assert out.watermarks["customers_current"].lsn == lsn(10) and out.watermarks["orders_current"].lsn == lsn(20)
    # nothing new landed: a table held by a file still refused does not move to the bound either
    again = facts("b3", previous=previous(20, "b2"), watermarks={**out.watermarks}, refused=refused[:1])
    assert advance(plan_run(again), again, []).watermarks["customers_current"].lsn == lsn(10)
    removed = facts("b3", previous=previous(20, "b2"), watermarks={**out.watermarks})
    assert advance(plan_run(removed), removed, []).watermarks["customers_current"].lsn == lsn(20)

    # an export refused for its columns, with its manifest and the good file it lists: the table
    # waits naming the export refused for its own reason, not the one refused for its manifest
    folder = "change_tables/dbo_customers"
    manifest, renamed, ok = f"{folder}/m.manifest.json", f"{folder}/renamed.csv", f"{folder}/cust_ok.csv"
    own = f"{renamed}: its columns lack notes, declared for capture instance dbo_customers"
    refused = (f"{ok}: {landing.REFUSED_MANIFEST.format(manifest, landing.REFUSED_FILE.format(renamed))}",
               f"{manifest}: {landing.REFUSED_FILE.format(renamed)}", own)
    p = plan_run(facts(arrived=arrived(cdc_metadata__lsn_time_mapping=(11, 20), change_tables__dbo_customers=(11, 19)),
                       refused=refused, refused_for_another=(ok, manifest)))
    assert p.tables["customers"].gap.startswith(f"tracked table customers waits: {renamed} (and 2 more) was refused")


def test_an_export_still_being_written_holds_its_tables_marts_without_failing_the_run():
    """A file the runner's two listings saw change (still being written) waits: were its table's
    marts to move past its LSNs this run, its rows would land below their watermark. The run does
    not fail (a file being written is no error); other tables go on; once it lands, they move."""
    unsettled = ("change_tables/dbo_customers/e5.csv", "ces/now.jsonl")
    f = facts(arrived=arrived(cdc_metadata__lsn_time_mapping=(11, 20), change_tables__dbo_customers=(11, 19),
                              change_tables__dbo_orders=(12, 19)))
    p = plan_run(f, Options(unsettled=unsettled))
    assert not p.tables["customers"].apply and p.tables["orders"].apply and p.tables["customers"].gap is None
    assert p.tables["customers"].waits == ("customers waits: change_tables/dbo_customers/e5.csv is still being written; "
                                           "its marts stay where they are until it lands")
    assert p.tables["orders"].waits is None and p.tables["employees"].waits is None
    out = advance(p, f, [NodeResult(m, "model", "success") for m in p.build])
    assert out.status == "succeeded" and out.failed == []
    assert out.watermarks["customers_current"].lsn == lsn(10) and out.watermarks["orders_current"].lsn == lsn(20)
    # the next run lands it: the customers' marts apply from where they stayed
    landed = facts("b3", previous=previous(20, "b2"), watermarks={**out.watermarks},
                   arrived=arrived(change_tables__dbo_customers=(13, 14)))
    p = plan_run(landed)
    assert p.tables["customers"].apply and p.models["customers_current"].lower_lsn == lsn(10)


def test_changes_arriving_at_or_below_the_watermark_rebuild_that_tables_marts():
    """A corrected re-export or an export later than its lsn_time_mapping lands changes the marts
    already moved past: that table's marts are rebuilt from staging (which holds every landed
    change), the others apply their window as usual; snapshots and a first build are not late."""
    f = facts(arrived=arrived(cdc_metadata__lsn_time_mapping=(11, 20), change_tables__dbo_customers=(4, 7),
                              change_tables__dbo_orders=(11, 19)))
    p = plan_run(f)
    assert p.tables["customers"].late == lsn(4) and p.tables["customers"].apply
    assert p.models["customers_current"].full and p.models["customers_history"].full
    assert p.models["customers_current"].upper_lsn == lsn(20)
    assert p.tables["orders"].late is None and not p.models["orders_current"].full
    # at the watermark is late too; above it is not
    assert plan_run(facts(arrived=arrived(change_tables__dbo_customers=(10, 12)))).tables["customers"].late == lsn(10)
    assert plan_run(facts(arrived=arrived(change_tables__dbo_customers=(11, 12)))).tables["customers"].late is None
    # a first build is not late; neither is a snapshot below the marts (it is stale, and named)
    assert plan_run(facts(arrived=arrived(change_tables__dbo_customers=(4, 7)), watermarks={},
                          relations=frozenset())).tables["customers"].late is None
    assert plan_run(facts(arrived=arrived(snapshots__customers=(4, 4)))).tables["customers"].late is None
    out = advance(p, f, [NodeResult(m, "model", "success") for m in p.build])
    assert out.status == "succeeded" and out.watermarks["customers_current"].lsn == lsn(20)
    # a change applied without a commit time gets it when its lsn_time_mapping row lands: its
    # table rebuilds from the smallest such LSN (begin_run finds them), the others do not
    timed = facts(arrived=arrived(cdc_metadata__lsn_time_mapping=(3, 20)), late_commit_times={"customers": lsn(6)})
    p = plan_run(timed)
    assert p.tables["customers"].late == lsn(6) and p.models["customers_history"].full
    assert p.tables["orders"].late is None and not p.models["orders_history"].full
    assert facts_from_report(report(late_commit_times={"Customers": lsn(6)})).late_commit_times == {"customers": lsn(6)}


def test_nothing_landed_and_every_mart_at_its_bound_is_nothing_to_do():
    p = plan_run(facts())
    assert p.status == "nothing_to_do" and p.build == []
    assert advance(p, facts(), []).status == "nothing_to_do"
    # a full refresh, a selection or a missing seed always build
    assert plan_run(facts(), Options(full_refresh=True)).status == "build"
    assert plan_run(facts(), Options(select=("customers_current",))).status == "build"
    assert plan_run(facts(seeds=SEEDS)).build_seeds
    # a missing relation is built (the marts of a table declared since: from scratch)
    added = plan_run(facts(relations=relations(CUSTOMERS, ORDERS, EMPLOYEES)))
    assert set(added.build) == {"stg_debezium__products", "products_history", "products_current"}
    assert added.models["products_current"].full


def test_a_seed_loads_when_missing_or_changed_and_records_its_checksum_once_loaded():
    loaded = {"cdc_operations": Watermark(batch="b1", declaration="c1"),
              "sqlserver_types": Watermark(batch="b1", declaration="t1")}
    both = relations(*ALL) | {"cdc_operations", "sqlserver_types"}
    f = facts(seeds=SEEDS, relations=both, watermarks={**settled(*ALL), **loaded})
    assert plan_run(f).seeds == {} and plan_run(f).status == "nothing_to_do"
    # a full refresh leaves loaded, unchanged seeds alone
    assert plan_run(f, Options(full_refresh=True)).seeds == {}
    # a changed seed file (a new release's vocabulary), a dropped table, a seed loaded before checksums
    changed = facts(seeds={**SEEDS, "sqlserver_types": Seed("sqlserver_types", "t2")}, relations=both,
                    watermarks={**settled(*ALL), **loaded})
    assert plan_run(changed).seeds == {"sqlserver_types": "t2"} and plan_run(changed).status == "build"
    assert plan_run(facts(seeds=SEEDS, relations=both - {"cdc_operations"},
                          watermarks={**settled(*ALL), **loaded})).seeds == {"cdc_operations": "c1"}
    assert set(plan_run(facts(seeds=SEEDS, relations=both)).seeds) == {"cdc_operations", "sqlserver_types"}
    # the checksum is recorded once the seed loaded, not when it failed
    p = plan_run(changed)
    ok = advance(p, changed, [NodeResult("sqlserver_types", "seed", "success")])
    assert ok.watermarks["sqlserver_types"] == Watermark(batch="b2", declaration="t2")
    failed = advance(p, changed, [NodeResult("sqlserver_types", "seed", "error")])
    assert failed.watermarks["sqlserver_types"] == loaded["sqlserver_types"]


def test_event_tables_build_when_their_events_arrive_and_segments_count_for_every_ces_table():
    other = Table("departments", "ces", (), "d6")
    tables = (*ALL, other)
    f = facts(tables=tables, arrived=arrived(ces=(11, 20), ces_at_employees=(11, 20)))
    p = plan_run(f)
    assert p.upper_lsn["ces"] == lsn(20) and p.upper_batch["ces"] == "b2"
    assert p.tables["employees"].apply and not p.tables["departments"].apply
    w = p.models["employees_history"]
    assert (w.lower_lsn, w.lower_batch, w.upper_lsn, w.upper_batch) == (lsn(10), "b1", lsn(20), "b2")
    assert "stg_ces__events" in p.build and "stg_ces__employees" in p.build
    # a late event (below the watermark) is applied too: its batch is new
    late = plan_run(facts(tables=tables, arrived={"ces": Landed(lsn(5), "b2", lsn(5)), "ces:employees": Landed(lsn(5), "b2", lsn(5))}))
    assert late.tables["employees"].apply and late.upper_lsn["ces"] == lsn(10)
    # a segment of a split message routes nowhere yet: every CES table may gain events
    split = plan_run(facts(tables=tables, arrived=arrived(ces=(11, 20)), ces_unrouted="b2"))
    assert split.tables["employees"].apply and split.tables["departments"].apply
    # the end of a Debezium snapshot completes it for every Debezium table
    ended = plan_run(facts(arrived=arrived(debezium=(11, 20)), debezium_snapshot_end={"": "b2"}))
    assert ended.tables["products"].apply
    out = advance(split, facts(tables=tables), [NodeResult(m, "model", "success") for m in split.build])
    assert out.watermarks["employees_current"] == Watermark(lsn(20), "b2", "d3")


def test_event_arrivals_give_each_channel_every_line_and_each_table_its_complete_events():
    rows = [  # channel, database, route, complete, snapshot_end, lsn, batch, records, min_lsn
        ["ces", "", "employees", True, False, lsn(12), "b3", 2, lsn(11)],
        ["ces", "", "employees", False, False, None, "b4", 1, None],  # untrusted: counts for the channel only
        ["ces", "", "?", False, False, None, "b4", 1, None],  # a segment of a message not reassembled yet
        ["ces", "", None, True, False, lsn(30), "b2", 5, lsn(5)],  # another table of the project's database
        ["debezium", "", "items", True, True, lsn(7), "b3", 4, lsn(6)],
        ["debezium", "", "items", True, False, lsn(9), "b2", 1, lsn(9)],
    ]
    got = event_arrivals(rows)
    assert got["arrived"] == {
        "ces": {"lsn": lsn(30), "min_lsn": lsn(5), "batch": "b4", "records": 9},
        "ces:employees": {"lsn": lsn(12), "min_lsn": lsn(11), "batch": "b3", "records": 2},
        "debezium": {"lsn": lsn(9), "min_lsn": lsn(6), "batch": "b3", "records": 5},
        "debezium:items": {"lsn": lsn(9), "min_lsn": lsn(6), "batch": "b3", "records": 5}}
    assert got["ces_unrouted"] == "b4" and got["debezium_snapshot_end"] == {"": "b3"}
    assert event_arrivals([]) == {"arrived": {}, "ces_unrouted": None, "debezium_snapshot_end": {}}


def test_kafka_landed_events_plan_as_file_lines_and_offsets_rows_count_for_nothing():
    """Kafka sources land records as the channel's lines (begin_run leaves their offsets rows out
    of what landed): the report of a run that read two CES records from Kafka."""
    kafka = report(
        run_id="b2", tables=[{"name": "employees", "channel": "ces", "instances": [], "digest": "d3"}],
        previous={"run_id": "b1", "landed": {"ces": {"lsn": lsn(10), "batch": "b1"}}},
        landed_now={"ces/orders-topic": 2},
        event_arrivals=[["ces", "", "employees", True, False, lsn(12), "b2", 2, lsn(11)]],
        watermarks={"employees_current": {"lsn": lsn(10), "batch": "b1", "declaration": "d3"},
                    "employees_history": {"lsn": lsn(10), "batch": "b1", "declaration": "d3"},
                    "stg_ces__employees": {"batch": "b1"}, "stg_ces__events": {"batch": "b1"}},
        relations=["stg_ces__employees", "employees_current", "employees_history", "stg_ces__events",
                   "cdc_quarantine", "stg_cdc_metadata__lsn_time_mapping", "stg_cdc_metadata__change_tables",
                   "stg_cdc_metadata__captured_columns"])
    f = facts_from_report(kafka)
    p = plan_run(f)
    assert f.arrived == {"ces": Landed(lsn(12), "b2", lsn(11)), "ces:employees": Landed(lsn(12), "b2", lsn(11))}
    assert f.landed_now == {"ces/orders-topic": 2}
    assert p.tables["employees"].apply and p.upper_lsn["ces"] == lsn(12)
    assert "stg_ces__events" in p.build


def test_a_changed_declaration_evolves_the_marts_and_a_selection_moves_only_what_it_built():
    marks = settled(*ALL)
    marks["customers_history"] = Watermark(lsn(10), None, "old")
    f = facts(watermarks=marks, arrived=arrived(cdc_metadata__lsn_time_mapping=(11, 20), change_tables__dbo_customers=(12, 19)))
    p = plan_run(f)
    assert p.models["customers_history"].evolve and p.models["customers_current"].evolve
    chosen = plan_run(f, Options(select=("customers_history",)))
    out = advance(chosen, f, [NodeResult("customers_history", "model", "success")])
    assert out.watermarks["customers_history"].lsn == lsn(20) and out.watermarks["customers_current"].lsn == lsn(10)
    assert out.watermarks["orders_current"].lsn == lsn(10)  # not chosen: not moved


def test_a_full_refresh_records_exactly_its_bound():
    f = facts(watermarks=settled(*ALL, upper=30))
    p = plan_run(f, Options(full_refresh=True, upper_lsn=lsn(20)))
    assert p.checks == "all" and p.models["customers_current"].full
    out = advance(p, f, [NodeResult(m, "model", "success") for m in p.models])
    assert out.watermarks["customers_current"].lsn == lsn(20)


def test_a_full_refresh_rebuilds_the_marts_from_what_is_staged_and_a_restage_rebuilds_staging_too():
    """--full-refresh: every mart from scratch, staging takes in only what landed since (a staging
    model with nothing new takes in no batch: its build is a no-op); --restage: staging too."""
    f = facts("b3", arrived=arrived(change_tables__dbo_customers=(11, 12)), watermarks=settled(*ALL, upper=10))
    p = plan_run(f, Options(full_refresh=True))
    assert all(p.models[m].full for m in ("customers_current", "customers_history", "orders_current"))
    customers, orders = p.models["stg_change_tables__customers"], p.models["stg_change_tables__orders"]
    assert not customers.full and (customers.from_batch, customers.through_batch) == ("b1", "b3")
    assert not orders.full and orders.from_batch == orders.through_batch == "b1"  # nothing new: nothing taken in
    assert "stg_change_tables__customers" in p.build and "stg_change_tables__orders" not in p.build
    restaged = plan_run(f, Options(restage=True))
    assert restaged.full_refresh and restaged.checks == "all"
    assert all(restaged.models[m].full and restaged.models[m].from_batch == "" and restaged.models[m].through_batch == "b3"
               for m in ("stg_change_tables__customers", "stg_change_tables__orders", "stg_ces__events"))
    assert all(restaged.models[m].full for m in ("customers_current", "orders_history"))


@pytest.mark.parametrize("key,expected", [("cdc_metadata/captured_columns", "stg_cdc_metadata__captured_columns"),
                                          ("cdc_metadata/change_tables", "stg_cdc_metadata__change_tables"),
                                          ("debezium", "stg_debezium__events")])
def test_shared_staging_builds_when_its_sources_land(key, expected):
    p = plan_run(facts(arrived={key: Landed(None, "b2")}))
    assert expected in p.build


def test_the_debezium_replay_floor_comes_from_the_facts_only_when_they_cover_what_the_model_takes_in():
    """The events model looks replays up among its staged events at or above the smallest commit
    LSN of the complete events it takes in: begin_run read it from the lines landed after the
    previous run, so the plan hands it over when the model takes in no earlier batch, and
    otherwise leaves it to the model (lower_lsn '')."""
    landed = arrived(debezium=(3, 7), debezium_at_products=(3, 7))
    window = plan_run(facts("b2", arrived=landed)).models["stg_debezium__events"]
    assert (window.from_batch, window.through_batch, window.lower_lsn, window.upper_lsn) == ("b1", "b2", lsn(3), lsn(7))
    # the model last took in a batch before the previous run's (that run failed before it): the
    # facts do not cover the batches between, so the model queries its floor
    marks = {**settled(*ALL), "stg_debezium__events": Watermark(batch="b0")}
    lagging = plan_run(facts("b2", arrived=landed, watermarks=marks)).models["stg_debezium__events"]
    assert lagging.from_batch == "b0" and lagging.lower_lsn == "" and "stg_debezium__events" in plan_run(
        facts("b2", arrived=landed, watermarks=marks)).build
    # no complete event arrived (only tombstones or quarantined lines), or a rebuild from scratch
    assert plan_run(facts("b2", arrived={"debezium": Landed(None, "b2")})).models["stg_debezium__events"].lower_lsn == ""
    assert plan_run(facts("b2", arrived=landed), Options(restage=True)).models["stg_debezium__events"].lower_lsn == ""
    assert plan_run(facts("b2", arrived={**landed, **arrived(ces=(3, 7))})).models["stg_ces__events"].lower_lsn == ""


def test_cleanup_retention_comes_from_the_newest_cdc_jobs_export_and_is_carried_forward():
    """docs/operations.md "Retention headroom": three days until a cdc_jobs export lands; its
    value then holds for the runs after (the ledger keeps it); a value that is not a whole number
    of minutes keeps the one before, saying why."""
    assert retention(facts()) == Retention(4320, None)
    assert retention(facts(cdc_jobs_retention={"": "1440"})) == Retention(1440, 1440)
    assert retention(facts(cdc_jobs_retention={"": "720.0"})) == Retention(720, 720)
    carried = facts("b3", previous=previous(retentions={"": 1440}))
    assert retention(carried) == Retention(1440, 1440)
    bad = retention(facts("b3", previous=previous(retentions={"": 1440}), cdc_jobs_retention={"": "three days"}))
    assert (bad.minutes, bad.landed) == (1440, 1440)
    assert bad.problem == ("cdc_jobs: the cleanup job's retention 'three days' is not a whole number of minutes; "
                           "keeping 1440 minutes")
    assert retention(facts(cdc_jobs_retention={"": "-5"})).problem.endswith("keeping 4320 minutes (the default)")
    assert plan_run(facts(cdc_jobs_retention={"": "60"})).retention[""].minutes == 60
    # a ledger row of an earlier release keeps the default database's retention alone
    row = {"run_id": "b1", "retention_minutes": 1440}
    assert facts_from_report(report(previous=row)).previous.retentions == {"": 1440}


def test_headroom_warns_under_the_threshold_and_always_once_cleanup_may_have_passed():
    rows = [{"tracked_table": "customers", "headroom_seconds": 5 * 3600 + 12 * 60},
            {"tracked_table": "orders", "headroom_seconds": 3 * 86400},
            {"tracked_table": "late", "headroom_seconds": -7200},
            {"tracked_table": "employees", "headroom_seconds": None}]
    assert headroom_warnings(rows, {"": Retention(4320, None)}, None) == [
        ("WARNING late: SQL Server's cleanup (retention 4320 minutes, the default: land a cdc_jobs export to give yours) "
        "may already have removed changes it has not applied (2h00m ago); run more often, or raise the retention "
        "(sys.sp_cdc_change_job @job_type = 'cleanup', @retention = ...)")]
    warned = headroom_warnings(rows, {"": Retention(4320, 4320, "cdc_jobs: ...")}, 12)
    assert [w.split(":")[0] for w in warned] == ["WARNING cdc_jobs", "WARNING customers", "WARNING late"]
    assert "(retention 4320 minutes, from cdc_jobs) reaches its first change not applied yet in 5h12m" in warned[1]


# ---- several databases (docs/tables.md "Several databases"): every LSN decision per database

def dblsn(db: str, n: int) -> str:
    """An LSN of database `db`: erp's far below crm's, each its own LSN space."""
    return f"{(0x10_00000100_0000 if db == 'erp' else 0x7F00_00000900_0000) + n:020X}"


ERP_ORDERS = Table("erp_orders", "change_tables", (("dbo_orders", False),), "e1", ("erp",))
CRM_ORDERS = Table("crm_orders", "change_tables", (("dbo_orders", False),), "c1", ("crm",))
TENANT_ORDERS = Table("orders", "change_tables", (("dbo_orders", False),), "tenant:t1", ("t1", "t2", "t3"), tenant=True)
NAMES = {"erp": "erp", "crm": "crm", "t1": "t1", "t2": "t2", "t3": "t3"}


def db_arrivals(db: str, table: Table, low: int, high: int, batch: str = "b2") -> dict[str, Landed]:
    """The mapping and a table's changes of one database landed in `batch`, with their LSNs."""
    return {f"databases/{db}/cdc_metadata/lsn_time_mapping": Landed(dblsn(db, high), batch, dblsn(db, low)),
            f"databases/{db}/change_tables/{table.instances[0][0]}": Landed(dblsn(db, high - 1), batch, dblsn(db, low + 1))}


def db_settled(*tables: Table, upper: int = 10) -> dict[str, Watermark]:
    """Each table's marts at `upper` in each of its databases, staging at b1."""
    marks = {m: Watermark(batch="b1") for m in SHARED[:5]} | {"cdc_quarantine": Watermark(batch="b1", declaration="v")}
    for t in tables:
        marks[t.staging] = Watermark(batch="b1")
        for db in t.databases:
            for m in t.marts:
                marks[f"databases/{db}/{m}"] = Watermark(dblsn(db, upper), None, t.digest)
    return marks


def db_facts(*tables: Table, **kw) -> Facts:
    kw.setdefault("relations", relations(*tables))
    kw.setdefault("watermarks", db_settled(*tables))
    kw.setdefault("previous", PreviousRun("b1", {f"databases/{db}/cdc_metadata/lsn_time_mapping": Landed(dblsn(db, 10), "b1")
                                                 for t in tables for db in t.databases}))
    kw.setdefault("views_digest", "v")
    kw.setdefault("database_names", NAMES)
    return Facts(run_id=kw.pop("run_id", "b2"), tables=tuple(tables), **kw)


def test_two_databases_sharing_a_capture_instance_apply_each_in_its_own_lsn_space():
    """dbo_orders exists in erp and crm; crm's LSNs lie far above erp's. Each table's bound is its
    own database's mapping, so both apply in full, and neither's LSNs bound the other's."""
    f = db_facts(ERP_ORDERS, CRM_ORDERS, arrived={**db_arrivals("erp", ERP_ORDERS, 11, 20),
                                                  **db_arrivals("crm", CRM_ORDERS, 11, 30)})
    p = plan_run(f)
    assert p.upper_lsn["databases/erp/change_tables"] == dblsn("erp", 20)
    assert p.upper_lsn["databases/crm/change_tables"] == dblsn("crm", 30)
    assert p.tables["erp_orders"].apply and p.tables["crm_orders"].apply
    erp, crm = p.models["erp_orders_current"], p.models["crm_orders_current"]
    assert (erp.lower_lsn, erp.upper_lsn) == (dblsn("erp", 10), dblsn("erp", 20))
    assert (crm.lower_lsn, crm.upper_lsn) == (dblsn("crm", 10), dblsn("crm", 30))
    assert [part.database for part in erp.parts] == ["erp"] and not erp.tenant
    # staging and the metadata models take in both databases' batches
    assert {"stg_change_tables__erp_orders", "stg_change_tables__crm_orders", "stg_cdc_metadata__lsn_time_mapping"} <= set(p.build)
    out = advance(p, f, [NodeResult(m, "model", "success") for m in p.build])
    assert out.watermarks["databases/erp/erp_orders_current"] == Watermark(dblsn("erp", 20), None, "e1")
    assert out.watermarks["databases/crm/crm_orders_current"] == Watermark(dblsn("crm", 30), None, "c1")
    # the window as the models read it: a table of one database has no parts, its bounds its own
    assert "parts" not in json.loads(json.dumps(p.var()))["models"]["erp_orders_current"]


def test_a_lagging_export_holds_only_its_own_databases_tables():
    """crm's exports come with manifests and lag its mapping: crm's tables stop at its cut, named;
    erp's go on to erp's mapping."""
    f = db_facts(ERP_ORDERS, CRM_ORDERS,
                 arrived={**db_arrivals("erp", ERP_ORDERS, 11, 20), **db_arrivals("crm", CRM_ORDERS, 11, 30)},
                 manifests=(Manifest("dbo_orders", dblsn("crm", 10), dblsn("crm", 18), "b2", "crm"),))
    p = plan_run(f)
    assert p.upper_lsn["databases/crm/change_tables"] == dblsn("crm", 18)
    assert p.upper_lsn["databases/erp/change_tables"] == dblsn("erp", 20)
    assert p.export["crm"].held_back == {"table": "crm_orders", "capture_instance": "dbo_orders",
                                         "exported_lsn": dblsn("crm", 18), "captured_lsn": dblsn("crm", 30)}
    assert p.export["erp"].held_back is None and p.export["erp"].without_manifest == ["dbo_orders"]
    assert p.exported == {"databases/crm/dbo_orders": dblsn("crm", 18)}

    held = [line for line in landing_lines(f, p) if line.startswith("cut")]
    assert held == [(f"cut of crm held back by crm_orders: its export (dbo_orders) reaches 0x{dblsn('crm', 18)}, capture of "
                    f"crm has reached 0x{dblsn('crm', 30)}; every change-table mart of crm stops at 0x{dblsn('crm', 18)} "
                    "until its next export lands (the summary's lag shows how far behind); the other databases' marts go on")]
    # the next run carries crm's reach by its key; erp's manifests start a chain of their own
    nxt = export_cut((CRM_ORDERS,), (), {"dbo_orders": dblsn("crm", 18)}, dblsn("crm", 30), False)
    assert nxt.cut == dblsn("crm", 18)


def test_a_tenant_table_applies_each_database_that_changed_and_moves_the_others_to_their_bound():
    """One declaration over t1, t2 and t3: a run with changes in t1 and t3 gives the marts' window
    one part each (their own bounds); t2, with nothing new, is no part and moves to its bound."""
    arrived_now = {**db_arrivals("t1", TENANT_ORDERS, 11, 20), **db_arrivals("t3", TENANT_ORDERS, 11, 14),
                   "databases/t2/cdc_metadata/lsn_time_mapping": Landed(dblsn("t2", 25), "b2", dblsn("t2", 11))}
    f = db_facts(TENANT_ORDERS, arrived=arrived_now)
    p = plan_run(f)
    w = p.models["orders_history"]
    assert w.tenant and not w.full
    assert [(part.database, part.name, part.lower_lsn, part.upper_lsn) for part in w.parts] == [
        ("t1", "t1", dblsn("t1", 10), dblsn("t1", 20)), ("t3", "t3", dblsn("t3", 10), dblsn("t3", 14))]
    assert w.lower_lsn == "" and w.upper_lsn is None  # a tenant mart's bounds are its parts'
    assert p.tables["orders"].apply and p.tables["orders"].databases["t2"].apply is False
    assert [part["database"] for part in p.var()["models"]["orders_history"]["parts"]] == ["t1", "t3"]
    out = advance(p, f, [NodeResult(m, "model", "success") for m in p.build])
    assert out.watermarks["databases/t1/orders_history"].lsn == dblsn("t1", 20)
    assert out.watermarks["databases/t3/orders_history"].lsn == dblsn("t3", 14)
    assert out.watermarks["databases/t2/orders_history"].lsn == dblsn("t2", 25)  # nothing of it: at its bound
    assert all(out.advanced[f"databases/{db}/orders_current"] for db in ("t1", "t2", "t3"))
    # a plain dbt build afterwards has an empty part per database
    plain = plain_windows(p, out)["orders_current"]
    assert [(x["database"], x["lower_lsn"], x["upper_lsn"]) for x in plain["remaining"]["parts"]] == [
        ("t1", dblsn("t1", 20), dblsn("t1", 20)), ("t3", dblsn("t3", 14), dblsn("t3", 14))]
    # its mart failed: no database moves
    failed = advance(p, f, [NodeResult(m, "model", "error" if m == "orders_current" else "success") for m in p.build])
    assert failed.watermarks["databases/t2/orders_current"].lsn == dblsn("t2", 10)
    assert not failed.advanced["databases/t1/orders_current"]


def test_a_tenant_database_that_joins_later_builds_its_history_from_its_first_export():
    """t3 is added to the declaration after the first runs: its part has no watermark, so it
    applies everything of t3 up to t3's bound, while t1's part applies only what is new."""
    marks = db_settled(TENANT_ORDERS)
    for m in TENANT_ORDERS.marts:
        del marks[f"databases/t3/{m}"]
    f = db_facts(TENANT_ORDERS, watermarks=marks,
                 arrived={**db_arrivals("t1", TENANT_ORDERS, 11, 12), **db_arrivals("t3", TENANT_ORDERS, 1, 9)})
    p = plan_run(f)
    parts = {part.database: part for part in p.models["orders_current"].parts}
    assert (parts["t3"].lower_lsn, parts["t3"].upper_lsn) == ("", dblsn("t3", 10))
    assert (parts["t1"].lower_lsn, parts["t1"].upper_lsn) == (dblsn("t1", 10), dblsn("t1", 12))
    assert not p.models["orders_current"].full


def test_a_gap_in_one_tenant_database_stops_that_database_only_and_fails_the_run_naming_it():
    f = db_facts(TENANT_ORDERS, arrived={**db_arrivals("t1", TENANT_ORDERS, 11, 20), **db_arrivals("t2", TENANT_ORDERS, 14, 20)},
                 instance_min_lsn={"databases/t2/dbo_orders": dblsn("t2", 14), "databases/t1/dbo_orders": dblsn("t1", 1)})
    p = plan_run(f)
    assert [part.database for part in p.models["orders_current"].parts] == ["t1"]
    gap = p.tables["orders"].databases["t2"].gap
    assert gap.startswith(f"gap detected for tracked table orders in t2: its marts need changes from LSN "
                          f"{dblsn('t2', 11)} but capture instance dbo_orders in t2 now starts at {dblsn('t2', 14)}")
    assert "Land a snapshot of orders from t2 (in databases/t2/snapshots/) taken at or after LSN" in gap
    out = advance(p, f, [NodeResult(m, "model", "success") for m in p.build])
    assert out.status == "failed" and out.failed == [f"table orders: {gap}"]
    assert out.watermarks["databases/t1/orders_current"].lsn == dblsn("t1", 20)
    assert out.watermarks["databases/t2/orders_current"].lsn == dblsn("t2", 10)  # held at its gap
    assert not out.advanced["databases/t2/orders_current"]


def test_snapshots_late_rows_and_refused_exports_are_per_database():
    # a snapshot of t2 reconciles t2's part only
    f = db_facts(TENANT_ORDERS, arrived={**db_arrivals("t1", TENANT_ORDERS, 11, 20), **db_arrivals("t2", TENANT_ORDERS, 11, 20)},
                 snapshots=(Snapshot("orders", dblsn("t2", 15), "b2", "t2"),))
    parts = {part.database: part for part in plan_run(f).models["orders_current"].parts}
    assert (parts["t2"].snapshot_lsn, parts["t2"].reconcile, parts["t2"].lower_lsn) == (dblsn("t2", 15), True, dblsn("t2", 15))
    assert parts["t1"].snapshot_lsn is None
    # rows of t1 below t1's watermark rebuild the whole tenant mart (every database's part, from scratch)
    late = dict(db_arrivals("t1", TENANT_ORDERS, 11, 20))
    late["databases/t1/change_tables/dbo_orders"] = Landed(dblsn("t1", 19), "b2", dblsn("t1", 3))
    p = plan_run(db_facts(TENANT_ORDERS, arrived=late))
    assert p.tables["orders"].databases["t1"].late == dblsn("t1", 3) and p.models["orders_history"].full
    assert [part.database for part in p.models["orders_history"].parts] == ["t1", "t2", "t3"]
    # a commit time that came late, of t3
    timed = plan_run(db_facts(TENANT_ORDERS, arrived=db_arrivals("t3", TENANT_ORDERS, 11, 20),
                              late_commit_times={"databases/t3/orders": dblsn("t3", 6)}))
    assert timed.tables["orders"].late == dblsn("t3", 6)
    # an export of t2 refused: t2 waits, t1 goes on
    held = plan_run(db_facts(TENANT_ORDERS, arrived={**db_arrivals("t1", TENANT_ORDERS, 11, 20),
                                                     **db_arrivals("t2", TENANT_ORDERS, 11, 20)},
                             refused=("databases/t2/change_tables/dbo_orders/e4.csv: cut short",)))
    assert held.tables["orders"].databases["t2"].gap.startswith(
        "tracked table orders in t2 waits: databases/t2/change_tables/dbo_orders/e4.csv was refused")
    assert held.tables["orders"].databases["t1"].apply
    # an export of t1 still being written: t1 waits this run, t2 applies
    written = plan_run(db_facts(TENANT_ORDERS, arrived={**db_arrivals("t1", TENANT_ORDERS, 11, 20),
                                                        **db_arrivals("t2", TENANT_ORDERS, 11, 20)}),
                       Options(unsettled=("databases/t1/change_tables/dbo_orders/e5.csv",)))
    assert written.tables["orders"].databases["t1"].waits and written.tables["orders"].databases["t2"].apply
    # the same capture instance's folder in the default database holds nothing of theirs
    other = plan_run(db_facts(TENANT_ORDERS, arrived=db_arrivals("t1", TENANT_ORDERS, 11, 20),
                              refused=("change_tables/dbo_orders/e4.csv: cut short",)))
    assert other.tables["orders"].gap is None


def test_retention_is_per_database_and_the_replay_floor_spans_every_database():
    f = db_facts(ERP_ORDERS, CRM_ORDERS, cdc_jobs_retention={"crm": "60"},
                 previous=PreviousRun("b1", {}, retentions={"erp": 1440}))
    p = plan_run(f)
    assert p.retention == {"crm": Retention(60, 60), "erp": Retention(1440, 1440)}
    bad = plan_run(db_facts(ERP_ORDERS, cdc_jobs_retention={"erp": "soon"}))
    assert bad.retention["erp"].problem.startswith("cdc_jobs of erp: the cleanup job's retention 'soon'")
    # Debezium events of two databases: the replay floor is the smaller of theirs
    items = Table("items", "debezium", (), "tenant:i1", ("erp", "crm"), tenant=True)
    arrivals = {"debezium": Landed(None, "b2"), "databases/erp/debezium": Landed(dblsn("erp", 9), "b2", dblsn("erp", 5)),
                "databases/crm/debezium": Landed(dblsn("crm", 9), "b2", dblsn("crm", 7))}
    marks = {"stg_debezium__events": Watermark(batch="b1")}
    two = plan_run(db_facts(items, arrived=arrivals, watermarks=marks, previous=PreviousRun("b1", {})))
    assert two.models["stg_debezium__events"].lower_lsn == dblsn("erp", 5)
    one = plan_run(db_facts(items, arrived={k: v for k, v in arrivals.items() if "erp" not in k}, watermarks=marks,
                            previous=PreviousRun("b1", {})))
    assert one.models["stg_debezium__events"].lower_lsn == dblsn("crm", 7)


def test_event_arrivals_are_per_database_and_events_of_no_declared_database_count_for_the_batch_only():
    rows = [  # channel, database, route, complete, snapshot_end, lsn, batch, records, min_lsn
        ["ces", "erp", "employees", True, False, dblsn("erp", 12), "b3", 2, dblsn("erp", 11)],
        ["ces", "crm", "employees", True, False, dblsn("crm", 4), "b3", 1, dblsn("crm", 4)],
        ["ces", None, None, True, False, dblsn("crm", 90), "b4", 3, dblsn("crm", 80)],  # a database not declared
        ["debezium", "crm", "items", True, True, dblsn("crm", 7), "b3", 4, dblsn("crm", 6)],
    ]
    got = event_arrivals(rows)
    assert got["arrived"]["ces"] == {"lsn": None, "min_lsn": None, "batch": "b4", "records": 6}
    assert got["arrived"]["databases/erp/ces:employees"]["lsn"] == dblsn("erp", 12)
    assert got["arrived"]["databases/crm/ces:employees"]["lsn"] == dblsn("crm", 4)
    assert got["arrived"]["databases/crm/ces"]["lsn"] == dblsn("crm", 4)
    assert got["debezium_snapshot_end"] == {"crm": "b3"}
    employees = Table("employees", "ces", (), "tenant:d3", ("erp", "crm"), tenant=True)
    p = plan_run(db_facts(employees, arrived=landing_facts(got), watermarks={}, previous=None, relations=frozenset()))
    assert p.upper_lsn["databases/erp/ces"] == dblsn("erp", 12) and p.upper_lsn["databases/crm/ces"] == dblsn("crm", 4)
    assert p.upper_batch["ces"] == "b4"


def landing_facts(events: dict) -> dict[str, Landed]:
    return {k: Landed(v["lsn"], v["batch"], v["min_lsn"]) for k, v in events["arrived"].items()}


def test_the_report_reads_per_database_keys_and_tables():
    got = facts_from_report(report(
        tables=[{"name": "orders", "channel": "change_tables", "instances": [{"name": "DBO_Orders"}], "digest": "t1",
                 "databases": ["t1", "t2"], "tenant": True}],
        manifests=[{"instance": "DBO_Orders", "after_lsn": None, "through_lsn": dblsn("t1", 3), "batch": "b1", "database": "t1"}],
        snapshots=[{"table": "Orders", "lsn": dblsn("t2", 3), "batch": "b1", "database": "t2"}],
        instance_min_lsn={"databases/Tenant_X/DBO_Orders": dblsn("t1", 1)},
        late_commit_times={"databases/Tenant_X/Orders": dblsn("t1", 2)},
        cdc_jobs_retention={"t1": 1440}, database_names={"t1": "t1"},
        previous={"run_id": "b1", "tables": [{"tracked_table": "orders", "source_database": "t2", "current_rows": 3}],
                  "retentions": {"t2": 60}}))
    assert got.tables[0].databases == ("t1", "t2") and got.tables[0].tenant
    assert got.manifests[0] == Manifest("dbo_orders", None, dblsn("t1", 3), "b1", "t1")
    assert got.snapshots[0] == Snapshot("orders", dblsn("t2", 3), "b1", "t2")
    assert got.instance_min_lsn == {"databases/Tenant_X/dbo_orders": dblsn("t1", 1)}
    assert got.late_commit_times == {"databases/Tenant_X/orders": dblsn("t1", 2)}
    assert got.cdc_jobs_retention == {"t1": "1440"}
    assert got.previous.tables["databases/t2/orders"]["current_rows"] == 3 and got.previous.retentions == {"t2": 60}


def test_marts_built_in_another_shape_are_rebuilt():
    """A table that becomes a tenant table (or stops being one) has marts keyed otherwise, and a
    table of one database declared on another database has marts of the first's changes: both
    rebuild from scratch; a tenant joining or the default database being named does not."""
    one = Table("orders", "change_tables", (("dbo_orders", False),), "d9", ("t1",))
    built_as_one = db_settled(one)
    becomes_tenant = plan_run(db_facts(TENANT_ORDERS, watermarks=built_as_one,
                                       arrived=db_arrivals("t1", TENANT_ORDERS, 11, 12)))
    assert becomes_tenant.models["orders_current"].full
    back = plan_run(db_facts(one, watermarks=db_settled(TENANT_ORDERS), arrived=db_arrivals("t1", one, 11, 12)))
    assert back.models["orders_current"].full
    moved = Table("orders", "change_tables", (("dbo_orders", False),), "d9", ("t2",))
    switched = plan_run(db_facts(moved, watermarks=built_as_one, arrived=db_arrivals("t2", moved, 11, 12)))
    assert switched.models["orders_current"].full
    assert not plan_run(db_facts(one, arrived=db_arrivals("t1", one, 11, 12))).models["orders_current"].full


def test_a_tenant_database_capturing_otherwise_than_the_declaration_waits_naming_it_and_the_others_go_on():
    """The shared declaration says dbo_orders captures customer_id (int, ordinal 1) and total
    (decimal(12,2), ordinal 2); t2's cdc.captured_columns puts total at ordinal 3, t3's lacks it:
    those databases wait, named, and t1 (capturing as declared) applies."""
    captured = (("dbo_orders", "customer_id", "int", 1), ("dbo_orders", "total", "decimal(12,2)", 2))
    tenant = replace_table(TENANT_ORDERS, captured=captured)
    arrivals = {k: v for db in ("t1", "t2", "t3") for k, v in db_arrivals(db, tenant, 11, 20).items()}
    report_rows = [["t1", "DBO_Orders", "customer_id", "int", 1], ["t1", "dbo_orders", "Total", "decimal", 2],
                   ["t2", "dbo_orders", "customer_id", "int", 1], ["t2", "dbo_orders", "total", "decimal", 3],
                   ["t3", "dbo_orders", "customer_id", "int", 1]]
    f = db_facts(tenant, arrived=arrivals, captured_columns=facts_from_report(report(captured_columns=report_rows)).captured_columns)
    p = plan_run(f)
    parts = p.tables["orders"].databases
    assert parts["t1"].apply and parts["t1"].gap is None
    assert parts["t2"].gap.startswith("tracked table orders in t2 waits: capture instance dbo_orders of t2 captures column "
                                      "total at ordinal 3, not 2 (its cdc.captured_columns)")
    assert "does not capture column total" in parts["t3"].gap
    assert [part.database for part in p.models["orders_current"].parts] == ["t1"]
    # another type (SQL Server's captured_columns names the base type); timestamp is captured as binary
    other = facts_from_report(report(captured_columns=[["t1", "dbo_orders", "customer_id", "int", 1],
                                                       ["t1", "dbo_orders", "total", "money", 2]])).captured_columns
    assert "captures column total as money, not decimal" in plan_run(db_facts(tenant, arrived=arrivals,
                                                                              captured_columns=other)).tables["orders"].gap
    stamped = replace_table(TENANT_ORDERS, captured=(("dbo_orders", "version", "binary(8)", 3),))
    same = facts_from_report(report(captured_columns=[["t1", "dbo_orders", "version", "timestamp", 3]])).captured_columns
    assert plan_run(db_facts(stamped, arrived=arrivals, captured_columns=same)).tables["orders"].gap is None
    # no captured_columns landed for a database: nothing to compare
    assert plan_run(db_facts(tenant, arrived=arrivals)).tables["orders"].gap is None


def replace_table(t: Table, **changes) -> Table:
    from dataclasses import replace

    return replace(t, **changes)
