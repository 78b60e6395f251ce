"""runner/run/plan.py without Spark: every rule a run's plan decides (bounds per channel, the export
cut, lagging and dropped capture instances, snapshots, gaps, what to build, nothing to do, event
routing, Kafka-landed events) and how the watermarks move after the build."""

from __future__ import annotations

import json

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
from runner.run.report import headroom_warnings
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
             "instance_min_lsn": {}, "views_digest": "", "seeds": {},
             "late_commit_times": {}, "cdc_jobs_retention": None}
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
    assert command.exclude == ("tag:cdc_audit", "cdc_operations") and not command.full_refresh
    assert command.populate_cache  # a seed loads: dbt's seed materialization looks its table up
    p = plan_run(batch, Options(full_refresh=True))
    assert dbt_build(p, batch) == BuildCommand((), ("cdc_operations",), True, True)
    p = plan_run(batch, Options(select=("customers_current",)))
    assert dbt_build(p, batch) == BuildCommand(("customers_current",), ("tag:cdc_audit",), False, True)
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
    ended = plan_run(facts(arrived=arrived(debezium=(11, 20)), debezium_snapshot_end="b2"))
    assert ended.tables["products"].apply
    out = advance(split, facts(tables=tables), [NodeResult(m, "model", "success") for m in split.build])
    assert out.watermarks["employees_current"] == Watermark(lsn(20), "b2", "d3")


def test_event_arrivals_give_each_channel_every_line_and_each_table_its_complete_events():
    rows = [  # channel, route, complete, snapshot_end, lsn, batch, records, min_lsn
        ["ces", "employees", True, False, lsn(12), "b3", 2, lsn(11)],
        ["ces", "employees", False, False, None, "b4", 1, None],  # untrusted: counts for the channel only
        ["ces", "?", False, False, None, "b4", 1, None],  # a segment of a message not reassembled yet
        ["ces", None, True, False, lsn(30), "b2", 5, lsn(5)],  # another database's table
        ["debezium", "items", True, True, lsn(7), "b3", 4, lsn(6)],
        ["debezium", "items", True, False, lsn(9), "b2", 1, lsn(9)],
    ]
    got = event_arrivals(rows)
    assert got["arrived"] == {
        "ces": {"lsn": lsn(30), "min_lsn": lsn(5), "batch": "b4", "records": 9},
        "ces:employees": {"lsn": lsn(12), "min_lsn": lsn(11), "batch": "b3", "records": 2},
        "debezium": {"lsn": lsn(9), "min_lsn": lsn(6), "batch": "b3", "records": 5},
        "debezium:items": {"lsn": lsn(9), "min_lsn": lsn(6), "batch": "b3", "records": 5}}
    assert got["ces_unrouted"] == "b4" and got["debezium_snapshot_end"] == "b3"
    assert event_arrivals([]) == {"arrived": {}, "ces_unrouted": None, "debezium_snapshot_end": None}


def test_kafka_landed_events_plan_as_file_lines_and_offsets_rows_count_for_nothing():
    """Kafka sources land records as the channel's lines (begin_run leaves their offsets rows out
    of what landed): the report of a run that read two CES records from Kafka."""
    kafka = report(
        run_id="b2", tables=[{"name": "employees", "channel": "ces", "instances": [], "digest": "d3"}],
        previous={"run_id": "b1", "landed": {"ces": {"lsn": lsn(10), "batch": "b1"}}},
        landed_now={"ces/orders-topic": 2},
        event_arrivals=[["ces", "employees", True, False, lsn(12), "b2", 2, lsn(11)]],
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
    assert retention(facts(cdc_jobs_retention="1440")) == Retention(1440, 1440)
    assert retention(facts(cdc_jobs_retention="720.0")) == Retention(720, 720)
    carried = facts("b3", previous=previous(retention_minutes=1440))
    assert retention(carried) == Retention(1440, 1440)
    bad = retention(facts("b3", previous=previous(retention_minutes=1440), cdc_jobs_retention="three days"))
    assert (bad.minutes, bad.landed) == (1440, 1440)
    assert bad.problem == ("cdc_jobs: the cleanup job's retention 'three days' is not a whole number of minutes; "
                           "keeping 1440 minutes")
    assert retention(facts(cdc_jobs_retention="-5")).problem.endswith("keeping 4320 minutes (the default)")
    assert plan_run(facts(cdc_jobs_retention="60")).retention.minutes == 60
    row = {"run_id": "b1", "retention_minutes": 1440}
    assert facts_from_report(report(previous=row)).previous.retention_minutes == 1440


def test_headroom_warns_under_the_threshold_and_always_once_cleanup_may_have_passed():
    rows = [{"tracked_table": "customers", "headroom_seconds": 5 * 3600 + 12 * 60},
            {"tracked_table": "orders", "headroom_seconds": 3 * 86400},
            {"tracked_table": "late", "headroom_seconds": -7200},
            {"tracked_table": "employees", "headroom_seconds": None}]
    assert headroom_warnings(rows, Retention(4320, None), None) == [
        ("WARNING late: SQL Server's cleanup (retention 4320 minutes, the default: land a cdc_jobs export to give yours) "
        "may already have removed changes it has not applied (2h00m ago); run more often, or raise the retention "
        "(sys.sp_cdc_change_job @job_type = 'cleanup', @retention = ...)")]
    warned = headroom_warnings(rows, Retention(4320, 4320, "cdc_jobs: ..."), 12)
    assert [w.split(":")[0] for w in warned] == ["WARNING cdc_jobs", "WARNING customers", "WARNING late"]
    assert "(retention 4320 minutes, from cdc_jobs) reaches its first change not applied yet in 5h12m" in warned[1]
