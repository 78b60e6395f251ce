"""Scaffolding (docs/tables.md "Scaffolding"): declarations, model files and YAML docs of captured tables
from their landed metadata, equal to the hand-written demo ones; running it twice changes
nothing; a build passes on the result."""

from __future__ import annotations

import re
import uuid

import pytest
import yaml

from cdc_simulator import landing_writer
from cdc_simulator.simulate import Simulator
from runner.project import scaffold
from tests.conftest import EVENT_TABLES, PROJECT_DIR, Pipeline, copy_project
from tests.expected import check_marts
from tests.scenarios import CHANGE_TABLES as TABLES
from tests.scenarios import FORMATS


def _declared(project):
    return yaml.safe_load((project / "dbt_project.yml").read_text())["vars"]["cdc_tracked_tables"]


def _entries(project):
    """Every model's YAML entry: its column names and data tests."""
    found = {}
    for yml in (project / "models").rglob("*.yml"):
        for m in (yaml.safe_load(yml.read_text()) or {}).get("models") or []:
            found[m["name"]] = ([c["name"] for c in m.get("columns", [])], m.get("data_tests"),
                                {c["name"]: c.get("data_tests") for c in m.get("columns", []) if c.get("data_tests")})
    return found


def _files(project):
    return {p.relative_to(project).as_posix(): p.read_bytes() for p in project.rglob("*")
            if p.is_file() and not {"target", "logs"} & set(p.relative_to(project).parts)}


def test_types_and_keys_come_from_the_metadata():
    assert [scaffold.sql_type(r) for r in (
        {"column_type": "nvarchar", "character_maximum_length": "-1"},
        {"column_type": "varchar", "character_maximum_length": 200},
        {"column_type": "decimal", "numeric_precision": "12", "numeric_scale": "2"},
        {"column_type": "decimal"},  # no precision: cannot be declared
        {"data_type": "datetime2", "datetime_precision": 3},
        {"column_type": "money", "numeric_precision": 19, "numeric_scale": 4},
        {"column_type": "Decimal(18, 4)"},
        {"column_type": "geography"},
        {"column_type": "nvarchar"},
    )] == ["nvarchar(max)", "varchar(200)", "decimal(12,2)", None, "datetime2(3)", "money", "decimal(18,4)", None, "nvarchar"]
    metadata = {
        "change_tables": [{"capture_instance": "dbo_places", "object_id": 7, "source_schema": "dbo", "source_table": "Places"}],
        "captured_columns": [
            {"object_id": 7, "column_name": "id", "column_type": "int", "column_ordinal": 1},
            {"object_id": 7, "column_name": "location", "column_type": "geography", "column_ordinal": 2},
            {"object_id": 7, "column_name": "name", "column_type": "nvarchar", "column_ordinal": 3},
        ],
        "index_columns": [],
    }
    (places,) = scaffold.describe(metadata, {})
    assert places.name == "places" and places.key == []
    assert places.columns == [{"name": "id", "type": "int", "ordinal": 1}, {"name": "name", "type": "nvarchar", "ordinal": 3}]
    assert [p.split(":")[0] for p in places.problems] == ["column location", "no key"]
    metadata["index_columns"] = [{"object_id": 7, "column_name": "id", "index_ordinal": 1}]
    assert scaffold.describe(metadata, {})[0].key == ["id"]
    assert scaffold.describe(metadata, {"places": ["name"]})[0].key == ["name"]


@pytest.mark.scenario
def test_scaffold_declares_the_demo_tables_from_their_landed_metadata(spark, tmp_path):
    """From the demo's captured_columns and change_tables exports, into a project without them:
    the same declarations, model files and YAML entries (columns and tests) as the hand-written
    demo; again: nothing changes; then a run builds and checks the marts."""
    names = [t.name for t in TABLES]
    project = copy_project(tmp_path / "project", {}, drop=(*EVENT_TABLES, *names))
    landing = tmp_path / "landing"
    landing_writer.write_captured_columns(landing, TABLES)
    landing_writer.write_change_tables(landing, "meta", TABLES, {t.capture_instance: 1 << 40 for t in TABLES})

    report = scaffold.scaffold(spark, project, landing)

    assert [line.split(":")[0] for line in report] == sorted(names)
    # the demo's declarations but for their `demo: true` mark (a scaffolded table is the user's)
    assert _declared(project) == {n: {k: v for k, v in _declared(PROJECT_DIR)[n].items() if k != "demo"} for n in names}
    demo, scaffolded = _entries(PROJECT_DIR), _entries(project)
    for name in names:
        for model in (f"stg_change_tables__{name}", f"{name}_current", f"{name}_history"):
            assert scaffolded[model] == demo[model], model
            assert (project / "models").rglob(f"{model}.sql")
    files = _files(project)
    assert [line.split(": ")[1] for line in scaffold.scaffold(spark, project, landing)] == ["unchanged", "unchanged"]
    assert _files(project) == files

    pipeline = Pipeline(spark, "s_" + uuid.uuid4().hex[:8], landing, project_dir=project)
    sim = Simulator(TABLES, seed=29)
    txs = sim.run(30)
    landing_writer.write_batch(landing, "b1", TABLES, txs, FORMATS)
    pipeline.run()
    check_marts(pipeline, sim, txs[-1].commit_lsn)


def test_two_capture_instances_of_one_table_are_declared_as_one_table(tmp_path):
    """The capture instances of one source table become one table with several (docs/tables.md
    "Capture-instance changes"), oldest first, equal to the hand-written declaration of
    tests/channels/test_capture_instances.py; a `dropped: true` the user added stays on the next run."""
    from tests.scenarios import NEW, OLD, TYPES
    from tests.scenarios import members_declaration as _declaration

    def columns(object_id, names):
        return [{"object_id": object_id, "column_name": n, "column_ordinal": i, **_type_row(TYPES[n])}
                for i, n in enumerate(names, 1)]

    metadata = {
        "change_tables": [
            {"capture_instance": "dbo_members_v2", "object_id": 9, "start_lsn": "0x0000002C000003010000",
             "source_schema": "dbo", "source_table": "members", "index_column_list": "[member_id]"},
            {"capture_instance": "dbo_members", "object_id": 8, "start_lsn": "0x0000002C000003000000",
             "source_schema": "dbo", "source_table": "members", "index_column_list": "[member_id]"}],
        "captured_columns": columns(8, OLD) + columns(9, NEW),
        "index_columns": [],
    }
    (members,) = scaffold.describe(metadata, {})
    hand_written = _declaration([{"name": "dbo_members", "columns": OLD}, {"name": "dbo_members_v2", "columns": NEW}])
    assert members.declaration() == {**hand_written, "source_schema": "dbo", "source_table": "members"}
    assert members.problems == []
    project = tmp_path / "project"
    project.mkdir()
    (project / "dbt_project.yml").write_text((PROJECT_DIR / "dbt_project.yml").read_text())
    assert scaffold._declare(project, members) == ["declaration written"]
    declared = _declared(project)["members"]
    declared["capture_instances"][0]["dropped"] = True
    text = (project / "dbt_project.yml").read_text().replace("        - name: dbo_members\n",
                                                              "        - name: dbo_members\n          dropped: true\n")
    (project / "dbt_project.yml").write_text(text)
    assert _declared(project)["members"] == declared
    assert scaffold._declare(project, members) == []
    assert _declared(project)["members"]["capture_instances"][0]["dropped"] is True


def _type_row(sql_type: str) -> dict:
    base, _, args = sql_type.partition("(")
    row = {"column_type": base}
    if base == "decimal":
        row["numeric_precision"], row["numeric_scale"] = args.rstrip(")").split(",")
    elif base in ("varchar", "nvarchar"):
        row["character_maximum_length"] = args.rstrip(")")
    elif base == "datetime2":
        row["datetime_precision"] = args.rstrip(")")
    return row


def test_tables_are_named_as_chosen_and_keep_their_names_on_later_runs(tmp_path):
    """--name SOURCE=NAME (by capture instance, source table, schema.table or default name), then
    the name of the declaration listing the capture instance, then the source table in snake case;
    clashes and names SQL cannot carry are refused naming the remedy."""
    import pytest

    from runner.errors import UsageError

    assert [scaffold.default_name(ci, t) for ci, t in (
        ("dbo_LedgerAccounts", "LedgerAccounts"), ("dbo_HTTPLogs", "HTTPLogs"), ("x", "Order Lines"),
        ("dbo_t2", None), ("dbo_customers", "customers"))] == [
        "ledger_accounts", "http_logs", "order_lines", "dbo_t2", "customers"]
    metadata = {
        "change_tables": [
            {"capture_instance": "dbo_LedgerAccounts", "object_id": 1, "source_schema": "dbo", "source_table": "LedgerAccounts",
             "index_column_list": "[account_id]"},
            {"capture_instance": "sales_InvoiceLines", "object_id": 2, "source_schema": "sales", "source_table": "InvoiceLines",
             "index_column_list": "[invoice_id], [line_no]"}],
        "captured_columns": [
            {"object_id": 1, "column_name": "account_id", "column_type": "int", "column_ordinal": 1},
            {"object_id": 2, "column_name": "invoice_id", "column_type": "int", "column_ordinal": 1},
            {"object_id": 2, "column_name": "line_no", "column_type": "smallint", "column_ordinal": 2}],
        "index_columns": [],
    }

    def names(chosen=None, declared=None, keys=None):
        return [c.name for c in scaffold.describe(metadata, keys or {}, scaffold.Naming(chosen, declared))]

    assert names() == ["invoice_lines", "ledger_accounts"]
    for source in ("dbo.LedgerAccounts", "LEDGERACCOUNTS", "dbo_ledgeraccounts", "ledger_accounts"):
        assert names({source: "gl_accounts"}) == ["gl_accounts", "invoice_lines"], source
    # a declared table keeps its name; --key takes the chosen name
    assert names(declared={"sales_invoicelines": "lines"}) == ["ledger_accounts", "lines"]
    (accounts,) = [c for c in scaffold.describe(metadata, {"gl": ["account_id"]}, scaffold.Naming({"LedgerAccounts": "gl"}))
                   if c.name == "gl"]
    assert accounts.key == ["account_id"]
    with pytest.raises(UsageError, match="declared as table 'lines'; --name sales_invoicelines=other"):
        names({"sales_InvoiceLines": "other"}, {"sales_invoicelines": "lines"})
    with pytest.raises(UsageError, match="letters, digits and underscores"):
        scaffold.Naming({"LedgerAccounts": "gl accounts"})
    # in a project: an unknown --name, two tables under one name, a name declared for another instance
    project = tmp_path / "project"
    project.mkdir()
    (project / "dbt_project.yml").write_text((PROJECT_DIR / "dbt_project.yml").read_text())
    naming = scaffold.Naming({"nosuch": "x"})
    scaffold.describe(metadata, {}, naming)
    assert naming.unused() == ["nosuch"]
    (ledger,) = [c for c in scaffold.describe(metadata, {}, scaffold.Naming({"LedgerAccounts": "customers"}))
                 if c.name == "customers"]
    with pytest.raises(UsageError, match=r"declared for capture instance dbo_customers, not dbo_LedgerAccounts: pass "
                                         r"--name dbo_LedgerAccounts=OTHER_NAME .*python -m runner init"):
        scaffold._declare(project, ledger)
    with pytest.raises(UsageError, match="would both be named 'books'"):
        scaffold.scaffold(None, project, tmp_path, names={"LedgerAccounts": "books", "InvoiceLines": "books"},
                          metadata={"": metadata})


def _blocks(text: str) -> dict[str, str]:
    """Each declared table's lines in dbt_project.yml: the comment lines right above it, its
    declaration."""
    lines = text.splitlines(keepends=True)
    begin = lines.index("  cdc_tracked_tables:\n")
    starts = [i for i, line in enumerate(lines) if i > begin and re.match(r"^    \w+:\n$", line) and not any(
        re.match(r"^\S", earlier) for earlier in lines[begin:i])]
    blocks = {}
    for n, i in enumerate(starts):
        first = i
        while lines[first - 1].startswith("    #"):
            first -= 1
        end = starts[n + 1] if n + 1 < len(starts) else next(j for j in range(i + 1, len(lines)) if not lines[j].startswith("     "))
        while lines[end - 1].startswith("    #"):
            end -= 1
        blocks[lines[i].strip().rstrip(":")] = "".join(lines[first:end])
    return blocks


def test_tables_are_removed_and_declared_in_place_keeping_every_other_line(tmp_path):
    """init's removal (runner.project.tables.remove_tables) takes out exactly each table's lines and the
    comments above it, whatever else is removed with it; scaffold appends a declaration in the
    demo's layout and keeps the lines after the tables where they were."""
    import itertools

    from runner.project.init import copy_project as copy
    from runner.project.init import remove_tables

    original = (PROJECT_DIR / "dbt_project.yml").read_text()
    blocks = _blocks(original)
    assert list(blocks) == ["customers", "order_lines", "employees", "products"]
    assert blocks["employees"].startswith("    # Fed by SQL Server 2025 Change Event Streaming")
    for n, names in enumerate(c for r in range(1, 5) for c in itertools.combinations(blocks, r)):
        project = copy(PROJECT_DIR, tmp_path / f"p{n}", {})
        remove_tables(project, list(names))
        expected = original
        for name in names:
            expected = expected.replace(blocks[name], "")
        if len(names) == len(blocks):
            expected = expected.replace("  cdc_tracked_tables:\n", "  cdc_tracked_tables: {}\n")
        assert (project / "dbt_project.yml").read_text() == expected, names
    # scaffold's declarations go after the last table, in the demo's layout (without its mark)
    project = copy(PROJECT_DIR, tmp_path / "declared", {})
    remove_tables(project, ["customers", "order_lines"])
    declared = yaml.safe_load(original)["vars"]["cdc_tracked_tables"]
    for name in ("customers", "order_lines"):
        d = declared[name]
        captured = scaffold.Captured(d["capture_instance"], name, d["source_schema"], d["source_table"], d["key"],
                                     d["columns"], instances=[(d["capture_instance"], [c["name"] for c in d["columns"]])])
        assert scaffold._declare(project, captured) == ["declaration written"]
        assert scaffold._declare(project, captured) == []
    mine = "".join(blocks[n].replace("      demo: true\n", "") for n in ("customers", "order_lines"))
    expected = original.replace(blocks["customers"], "").replace(blocks["order_lines"], "")
    expected = expected.replace(blocks["products"], blocks["products"] + mine)
    assert (project / "dbt_project.yml").read_text() == expected


def test_the_names_scaffold_avoids_are_the_names_a_declaration_is_refused():
    """scaffold.RESERVED is what macro _check_declared_names refuses (its `added` and `spark`
    lists): a name scaffold proposes is never one the declaration's check refuses, and a name it
    renames is one the check would refuse."""
    macro = (PROJECT_DIR / "macros" / "tracked" / "tracked_table.sql").read_text()
    body = macro[macro.index("macro _check_declared_names"):]
    lists = {name: re.findall(r"'([a-z_]+)'", re.search(rf"set {name} = \[(.*?)\]", body, re.DOTALL).group(1))
             for name in ("added", "spark")}
    assert sorted(scaffold.RESERVED) == sorted(lists["added"] + lists["spark"])


def test_an_estate_is_scaffolded_per_database_and_tenant_databases_as_one_table(tmp_path):
    """docs/tables.md "Several databases": each database's metadata declares its tables with
    their database; two databases' tables of one name are refused naming both and the remedy;
    --tenants declares the databases a pattern matches as one tenant table, and a tenant database
    capturing otherwise is named and not written."""
    def metadata(total_type: str = "decimal", ordinal: int = 2) -> dict:
        return {
            "change_tables": [{"capture_instance": "dbo_Orders", "object_id": 5, "source_schema": "dbo",
                               "source_table": "Orders", "index_column_list": "[order_id]"}],
            "captured_columns": [
                {"object_id": 5, "column_name": "order_id", "column_type": "int", "column_ordinal": 1},
                {"object_id": 5, "column_name": "total", "column_type": total_type, "column_ordinal": ordinal,
                 "numeric_precision": 12, "numeric_scale": 2}],
            "index_columns": [],
        }

    project = copy_project(tmp_path / "project", {}, replace=True)

    def declare_databases(databases: dict) -> None:
        config = yaml.safe_load((project / "dbt_project.yml").read_text())
        config["vars"]["cdc_databases"] = databases
        (project / "dbt_project.yml").write_text(yaml.safe_dump(config, sort_keys=False))

    declare_databases({"erp": {}, "crm": {}})
    estate = {"erp": metadata(), "crm": metadata()}
    with pytest.raises(scaffold.UsageError, match=r"capture instances crm:dbo_Orders and erp:dbo_Orders of different source "
                                                  r"tables would both be named 'orders': pass --name erp:dbo_Orders=OTHER_NAME"):
        scaffold.scaffold(None, project, tmp_path, metadata=estate)
    lines = scaffold.scaffold(None, project, tmp_path, names={"crm:dbo_Orders": "crm_orders"}, metadata=estate)
    assert [line.split(":")[0] for line in lines] == ["crm_orders", "orders"]
    declared = _declared(project)
    assert (declared["crm_orders"]["database"], declared["orders"]["database"]) == ("crm", "erp")
    assert scaffold.scaffold(None, project, tmp_path, names={"crm:dbo_Orders": "crm_orders"}, metadata=estate) == [
        "crm_orders: unchanged", "orders: unchanged"]
    # metadata of a database nobody declared
    with pytest.raises(scaffold.UsageError, match="the landing folder holds metadata of hr, which var cdc_databases does "
                                                  "not declare"):
        scaffold.scaffold(None, project, tmp_path, metadata={**estate, "hr": metadata()})

    # tenants: one table over t1..t3, declared by the pattern
    tenants = copy_project(tmp_path / "tenants", {}, replace=True)
    project = tenants
    declare_databases({"t1": {}, "t2": {}, "t3": {}})
    lines = scaffold.scaffold(None, project, tmp_path, tenants=["t*"],
                              metadata={"t1": metadata(), "t2": metadata(), "t3": metadata()})
    assert lines[0].startswith("orders: declaration written")
    assert _declared(project)["orders"]["databases"] == ["t*"] and "database" not in _declared(project)["orders"]
    # a tenant database capturing a column otherwise: named, the table not written
    project = copy_project(tmp_path / "tenants2", {}, replace=True)
    declare_databases({"t1": {}, "t2": {}, "t3": {}})
    lines = scaffold.scaffold(None, project, tmp_path, tenants=["t*"],
                              metadata={"t1": metadata(), "t2": metadata(ordinal=3), "t3": metadata("money")})
    assert lines == [
        ("orders (t* dbo_Orders): tenant database t2 captures it otherwise than t1: column total is decimal(12,2) (ordinal 3), "
        "not decimal(12,2) (ordinal 2); declare that database's table apart, or make its capture match"),
        ("orders (t* dbo_Orders): tenant database t3 captures it otherwise than t1: column total is money (ordinal 2), "
        "not decimal(12,2) (ordinal 2); declare that database's table apart, or make its capture match"),
        "orders: not written"]
    with pytest.raises(scaffold.UsageError, match="--tenants x\\* matches no database"):
        scaffold.scaffold(None, project, tmp_path, tenants=["x*"], metadata={"t1": metadata()})
