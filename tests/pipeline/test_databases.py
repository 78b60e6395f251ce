"""Several databases in one project (docs/tables.md "Several databases"): each database's exports in
`databases/<name>/` of the landing folder, each applied in its own LSN space. Distinct databases
sharing a capture instance name with LSN spaces far apart, one lagging a batch behind its
mapping (only its tables held, named), both caught up to the reference; a tenant table fanning
three databases into one pair of marts keyed by source_database, one of them joining after the
first run and two sharing LSN values, equal to the per-database references unioned; CES and
Debezium events of two databases in one topic set; the refusals that name a database."""

from __future__ import annotations

import uuid
from dataclasses import replace

import pytest

from cdc_simulator import ces_writer, debezium_writer, landing_writer
from cdc_simulator.simulate import Simulator, TableSpec, lsn_hex
from runner.errors import UsageError
from runner.project.config import declared_databases, tracked_table_declarations
from runner.project.yaml_edit import edit_yaml
from runner.sources import landing
from tests.conftest import Pipeline, copy_project
from tests.expected import current_state, history
from tests.scenarios import CHANGE_TABLES, ITEMS

CUSTOMERS = next(t for t in CHANGE_TABLES if t.name == "customers")
LOW, HIGH = 0x00000010_00000100_0000, 0x7F000000_00000900_0000  # two LSN spaces, one far above the other


def _declaration(spec: TableSpec, **given) -> dict:
    channel = {"channel": "change_tables", "capture_instance": spec.capture_instance} if spec.channel == "change_tables" \
        else {"channel": spec.channel, "source_schema": spec.source[1], "source_table": spec.source[2]}
    return {**channel, **given, "key": list(spec.key),
            "columns": [{"name": c.name, "type": c.type, "ordinal": c.ordinal} for c in spec.columns]}


def _project(spark, tmp_path, tables: dict, databases: dict) -> Pipeline:
    project = copy_project(tmp_path / "project", tables, replace=True)
    _declare_databases(project, databases)
    (tmp_path / "landing").mkdir()
    return Pipeline(spark, "t_" + uuid.uuid4().hex[:8], tmp_path / "landing", project_dir=project)


def _declare_databases(project, databases: dict) -> None:
    def put(document) -> bool:
        document["vars"]["cdc_databases"] = databases
        return True

    edit_yaml(project / "dbt_project.yml", put)


def _folder(pipeline: Pipeline, database: str):
    return pipeline.landing / "databases" / database


def _mart(pipeline: Pipeline, spec: TableSpec, mart: str, database: str | None = None) -> dict:
    """A mart's rows by key (history: and valid_from_lsn), a tenant table's of one database."""
    where = f" where source_database = '{database}'" if database else ""
    rows = pipeline.rows(f"select * from {{s}}.{spec.name}_{mart}{where}")
    key = list(spec.key) + (["valid_from_lsn"] if mart == "history" else [])
    found = {tuple(r[k] for k in key): r for r in rows}
    assert len(found) == len(rows), f"{spec.name}_{mart} has two rows of one key"
    return found


def _check(pipeline: Pipeline, spec: TableSpec, sim: Simulator, upper: int, database: str | None = None) -> None:
    """The marts (a tenant table's rows of `database`) equal the reference of the simulated history."""
    for mart, reference in (("current", current_state), ("history", history)):
        expected = reference(spec, sim.transactions, upper)
        got = _mart(pipeline, spec, mart, database)
        assert set(got) == set(expected), f"{spec.name}_{mart} ({database}) keys differ"
        for key, want in expected.items():
            for column, value in want.items():
                assert got[key][column] == value, f"{spec.name}_{mart} ({database}) {key} {column}"


@pytest.mark.scenario
def test_two_databases_sharing_a_capture_instance_apply_in_their_own_lsn_spaces_and_a_lagging_one_holds_only_its_own(
        spark, tmp_path):
    """erp and crm both capture dbo_customers; crm's LSNs lie far above erp's. Each table's bound
    is its own database's: both apply in full. With export manifests, crm's export lagging its
    mapping holds crm's table only (the run names it), erp's goes on; once it lands, crm catches up."""
    erp, crm = replace(CUSTOMERS, name="erp_customers"), replace(CUSTOMERS, name="crm_customers")
    pipeline = _project(spark, tmp_path, {"erp_customers": _declaration(erp, database="erp"),
                                   "crm_customers": _declaration(crm, database="crm")},
                        {"erp": {}, "crm": {"database": "CRM_Prod"}})
    sims = {"erp": Simulator([erp], seed=5, start_lsn=LOW), "crm": Simulator([crm], seed=6, start_lsn=HIGH)}
    specs = {"erp": erp, "crm": crm}
    uppers = {}
    for db, sim in sims.items():
        txs = sim.run(30)
        landing_writer.write_captured_columns(_folder(pipeline, db), [specs[db]])
        landing_writer.write_batch(_folder(pipeline, db), "b1", [specs[db]], txs, {}, min_lsn={"dbo_customers": txs[0].begin_lsn},
                                   manifest=(None, txs[-1].commit_lsn))
        uppers[db] = txs[-1].commit_lsn
    summary = {r["tracked_table"]: r for r in pipeline.run()}
    for db, sim in sims.items():
        _check(pipeline, specs[db], sim, uppers[db])
        assert summary[specs[db].name]["source_database"] == db
        assert summary[specs[db].name]["lsn_reached"] == lsn_hex(uppers[db])
    # the default database's folder would be the top level: nothing landed there
    assert pipeline.rows("select count(*) as n from {s}_raw.landed_rows where source_database is null"
                         " and landing_kind = 'change_tables'")[0]["n"] == 0

    # batch 2: erp's export and mapping; crm's mapping alone (its export lags)
    erp_txs, crm_txs = sims["erp"].run(15), sims["crm"].run(15)
    landing_writer.write_batch(_folder(pipeline, "erp"), "b2", [erp], erp_txs, {}, manifest=(uppers["erp"], erp_txs[-1].commit_lsn))
    landing_writer.write_batch(_folder(pipeline, "crm"), "b2", [], crm_txs, {})
    notes: list[str] = []
    summary = {r["tracked_table"]: r for r in pipeline.run(notes=notes)}
    assert any(line.startswith("cut of crm held back by crm_customers: its export (dbo_customers) reaches "
                               f"0x{lsn_hex(uppers['crm'])}, capture of crm has reached 0x{lsn_hex(crm_txs[-1].commit_lsn)}")
               and line.endswith("the other databases' marts go on") for line in notes), notes
    _check(pipeline, erp, sims["erp"], erp_txs[-1].commit_lsn)
    _check(pipeline, crm, sims["crm"], uppers["crm"])
    assert summary["crm_customers"]["lag_seconds"] > 0 and summary["erp_customers"]["lag_seconds"] == 0

    # batch 3: crm's export lands; crm catches up, erp has nothing new
    landing_writer.write_export(_folder(pipeline, "crm"), "b3", crm, crm_txs, "csv", uppers["crm"], crm_txs[-1].commit_lsn)
    summary = {r["tracked_table"]: r for r in pipeline.run()}
    _check(pipeline, crm, sims["crm"], crm_txs[-1].commit_lsn)
    _check(pipeline, erp, sims["erp"], erp_txs[-1].commit_lsn)
    assert summary["erp_customers"]["changes_applied"] == 0 and summary["crm_customers"]["changes_applied"] > 0
    ledger = pipeline.rows("select tables, upper_lsn from {s}.cdc_runs order by run_id desc limit 1")[0]
    assert {t["tracked_table"]: t["source_database"] for t in ledger["tables"]} == {"erp_customers": "erp",
                                                                                    "crm_customers": "crm"}
    assert ledger["upper_lsn"]["databases/crm/change_tables"] == lsn_hex(crm_txs[-1].commit_lsn)
    marks = pipeline.rows("select model_name, source_database, watermark_lsn from {s}.cdc_watermarks"
                          " where model_name like '%_customers_current'")
    assert {(m["model_name"], m["source_database"]): m["watermark_lsn"] for m in marks} == {
        ("erp_customers_current", "erp"): lsn_hex(erp_txs[-1].commit_lsn),
        ("crm_customers_current", "crm"): lsn_hex(crm_txs[-1].commit_lsn)}


@pytest.mark.scenario
def test_a_tenant_table_fans_databases_into_one_pair_of_marts_and_a_tenant_joins_later(spark, tmp_path):
    """customers over tenant databases t1, t2 (declared by a pattern), keyed by source_database:
    the same key values in every database, t3's LSNs the same as t1's. t3 joins after the first
    run with one line; its history is built from its first export, t2 (nothing new) untouched."""
    pipeline = _project(spark, tmp_path, {"customers": _declaration(CUSTOMERS, databases=["t*"])},
                        {"t1": {}, "t2": {"database": "Tenant2"}})
    sims = {"t1": Simulator([CUSTOMERS], seed=11, start_lsn=LOW), "t2": Simulator([CUSTOMERS], seed=12, start_lsn=HIGH),
            "t3": Simulator([CUSTOMERS], seed=13, start_lsn=LOW)}
    uppers, landed = {}, {}

    def land(db: str, batch: str, count: int) -> None:
        txs = sims[db].run(count)
        landed[db] = [row for tx in txs for rows in tx.changes.values() for row in rows]
        if batch == "b1":
            landing_writer.write_captured_columns(_folder(pipeline, db), [CUSTOMERS])
        landing_writer.write_batch(_folder(pipeline, db), batch, [CUSTOMERS], txs, {},
                                   min_lsn={"dbo_customers": txs[0].begin_lsn} if batch == "b1" else None)
        uppers[db] = txs[-1].commit_lsn

    land("t1", "b1", 30)
    land("t2", "b1", 20)
    summary = pipeline.run()
    assert sorted((r["source_database"], r["tracked_table"]) for r in summary) == [("t1", "customers"), ("t2", "customers")]
    for db in ("t1", "t2"):
        _check(pipeline, CUSTOMERS, sims[db], uppers[db], database=db)
    # the key values repeat in every database: rows of their own
    assert pipeline.rows("select count(distinct customer_id) as keys, count(*) as n from {s}.customers_current")[0]["n"] \
        > pipeline.rows("select count(distinct customer_id) as keys from {s}.customers_current")[0]["keys"]

    # t3 joins: one line in cdc_databases; its first export and t1's second batch land
    _declare_databases(pipeline.project_dir, {"t1": {}, "t2": {"database": "Tenant2"}, "t3": {}})
    land("t3", "b1", 25)
    land("t1", "b2", 10)
    before_t2 = pipeline.rows("select count(*) as n from {s}.customers_history where source_database = 't2'")[0]["n"]
    summary = {r["source_database"]: r for r in pipeline.run()}
    for db in ("t1", "t2", "t3"):
        _check(pipeline, CUSTOMERS, sims[db], uppers[db], database=db)
    assert summary["t2"]["changes_applied"] == 0 and summary["t3"]["changes_applied"] > 0
    # each database's counts are its own: the change rows of the batch it landed (update-before rows
    # are not changes applied), and its rows of the tenant marts
    for db in ("t1", "t2", "t3"):
        rows = landed[db] if db != "t2" else []
        assert (summary[db]["rows_landed"], summary[db]["changes_applied"]) == \
            (len(rows), sum(1 for r in rows if r.operation != 3)), db
        for mart, column in (("current", "current_rows"), ("history", "history_versions")):
            assert summary[db][column] == len(_mart(pipeline, CUSTOMERS, mart, db)), (db, column)
    assert pipeline.rows("select count(*) as n from {s}.customers_history where source_database = 't2'")[0]["n"] == before_t2
    # one MERGE per mart for both databases' changes: the tenant marts are one table each
    merges = pipeline.spark.sql(f"describe history {pipeline.schema}.customers_current limit 1").collect()[0]
    assert merges["operation"] == "MERGE"
    plan = pipeline.rows("select plan from {s}.cdc_runs order by run_id desc limit 1")[0]["plan"]
    assert '"parts": [{"database": "t1"' in plan and '{"database": "t3"' in plan and '"database": "t2"' not in plan


@pytest.mark.scenario
def test_ces_and_debezium_events_of_two_databases_in_one_topic_set(spark, tmp_path):
    """Change Event Streaming events of DbA and DbB in one event hub feed one tenant table; a
    Debezium connector with database.names publishes both databases' items topics, which feed a
    table per database. Both databases' LSNs are the same values: only the database tells them apart."""
    employees = replace(CUSTOMERS, name="employees", capture_instance=None, channel="ces", source=("DbA", "dbo", "Staff"))
    items = {"a": replace(ITEMS, name="a_items", source=("DbA", "dbo", "items")),
             "b": replace(ITEMS, name="b_items", source=("DbB", "dbo", "items"))}
    pipeline = _project(spark, tmp_path, {
        "employees": _declaration(employees, databases=["a", "b"]),
        "a_items": _declaration(items["a"], database="a"),
        "b_items": _declaration(items["b"], database="b"),
    }, {"a": {"database": "DbA", "server": "server1"}, "b": {"database": "DbB", "server": "server1"}})
    sims, events, lines = {}, [], []
    for db, sql in (("a", "DbA"), ("b", "DbB")):
        spec = replace(employees, source=(sql, "dbo", "Staff"))
        sims[db] = Simulator([spec, items[db]], seed={"a": 21, "b": 22}[db], start_lsn=LOW)
        txs = sims[db].run(40)
        events += ces_writer.table_events(spec, txs, ces_writer.CesOptions(db_guid=str(uuid.uuid4())), seed=len(events))
        lines += debezium_writer.Renderer(items[db], debezium_writer.DebeziumOptions(server="server1")).changes(txs)
    ces_writer.write_lines(pipeline.landing / "ces" / "hub" / "b1.jsonl", events)
    debezium_writer.write_lines(pipeline.landing / "debezium" / "server1" / "b1.jsonl", lines)
    pipeline.run()
    for db in ("a", "b"):
        upper = sims[db].transactions[-1].commit_lsn
        _check(pipeline, employees, sims[db], upper, database=db)
        _check(pipeline, items[db], sims[db], upper)


def test_databases_are_declared_once_and_a_table_names_its_own(tmp_path):
    """The declarations' refusals, before Spark starts (runner/project/config.py)."""
    project = copy_project(tmp_path / "project", {"orders": _declaration(CUSTOMERS)}, replace=True)
    assert declared_databases(project) == {}
    _declare_databases(project, {"erp": {}, "crm": {}})
    with pytest.raises(UsageError, match=r"tracked table 'orders' in dbt_project.yml: the project declares 2 databases "
                                         r"\(crm, erp\); say which this table comes from: database: <name>"):
        tracked_table_declarations(project)
    _declare_databases(project, {"erp": {}, "crm": {}, "bad name": {}})
    with pytest.raises(UsageError, match="database name 'bad name' must be letters"):
        declared_databases(project)
    _declare_databases(project, {"erp": {"default": True}, "crm": {"default": True}})
    with pytest.raises(UsageError, match="erp, crm are each marked default: true"):
        declared_databases(project)
    _declare_databases(project, {"erp": {"shard": 1}})
    with pytest.raises(UsageError, match=r"database 'erp': unknown field\(s\) shard"):
        declared_databases(project)
    for given, message in [({"database": "hr"}, "database 'hr' is not declared in var cdc_databases"),
                           ({"databases": ["t*"]}, "databases: 't\\*' matches no database"),
                           ({"database": "erp", "databases": ["erp"]}, "give database .* or databases .*, one")]:
        _declare_databases(project, {"erp": {}})
        config = copy_project(tmp_path / f"p{len(message)}", {"orders": _declaration(CUSTOMERS, **given)}, replace=True)
        _declare_databases(config, {"erp": {}})
        with pytest.raises(UsageError, match=message):
            tracked_table_declarations(config)


def test_files_of_a_database_not_declared_are_refused_naming_it_and_the_remedy(tmp_path):
    folder = tmp_path / "landing"
    (folder / "databases" / "hr" / "change_tables" / "dbo_people").mkdir(parents=True)
    (folder / "databases" / "hr" / "change_tables" / "dbo_people" / "e1.csv").write_text("__$start_lsn\n0x01\n")
    (folder / "change_tables" / "dbo_customers").mkdir(parents=True)
    (folder / "change_tables" / "dbo_customers" / "e1.csv").write_text("__$start_lsn\n0x01\n")
    (folder / "ces").mkdir()
    (folder / "ces" / "e1.jsonl").write_text("{}\n")
    project = copy_project(tmp_path / "project", {"orders": _declaration(CUSTOMERS, database="erp")}, replace=True)
    _declare_databases(project, {"erp": {}})
    found = {f["relative"]: f for f in landing.files_to_land(folder, databases=declared_databases(project))}
    assert found["databases/hr/change_tables/dbo_people/e1.csv"]["refused"].startswith(
        "it is in the folder of database hr, which var cdc_databases does not declare (declared: erp): declare it there")
    assert found["change_tables/dbo_customers/e1.csv"]["refused"].startswith(
        "the landing folder's top level holds the default database's exports, and var cdc_databases declares no default")
    assert "refused" not in found["ces/e1.jsonl"]  # events name their own database
    assert found["databases/hr/change_tables/dbo_people/e1.csv"]["database"] == "hr"
    # the default database declared: the top level is its
    _declare_databases(project, {"erp": {}, "sales": {"default": True}})
    found = {f["relative"]: f for f in landing.files_to_land(folder, databases=declared_databases(project))}
    assert "refused" not in found["change_tables/dbo_customers/e1.csv"]
