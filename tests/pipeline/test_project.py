"""The project as users meet it: `dbt docs generate` works and every model, column, seed and
public macro is documented (the house style's 100% documentation target), and a mistake in a
declaration is an error that names the table and the field."""

from __future__ import annotations

import json
import re

import pytest
import yaml

from tests.conftest import PROJECT_DIR, compile_sql


@pytest.fixture(scope="module")
def documented(spark, tmp_path_factory) -> dict:
    """`dbt docs generate` on an empty warehouse, into a target folder of its own: the manifest it
    writes (each test here reads it, in whatever order they run)."""
    from dbt.cli.main import dbtRunner

    target = tmp_path_factory.mktemp("docs_target")
    result = dbtRunner().invoke(["--quiet", "docs", "generate", "--project-dir", str(PROJECT_DIR),
                                 "--profiles-dir", str(PROJECT_DIR), "--target", "local", "--target-path", str(target)])
    assert result.success, result.exception
    assert (target / "catalog.json").exists() and (target / "index.html").exists()
    return json.loads((target / "manifest.json").read_text())


def test_docs_generate_and_documentation_coverage(documented):
    manifest = documented
    undocumented = []
    for node in manifest["nodes"].values():
        if node["package_name"] != "sqlserver_cdc" or node["resource_type"] not in ("model", "seed"):
            continue
        if not node["description"].strip():
            undocumented.append(node["unique_id"])
        for column in node["columns"].values():
            if not column["description"].strip():
                undocumented.append(f"{node['unique_id']}.{column['name']}")
    for macro in manifest["macros"].values():
        name = macro["name"]
        if macro["package_name"] != "sqlserver_cdc" or name.startswith(("_", "default__")):
            continue
        if name.startswith("spark__") and f"macro.sqlserver_cdc.{name[len('spark__'):]}" in manifest["macros"]:
            continue  # the Spark body of a documented, dispatched macro
        if not macro["description"].strip():
            undocumented.append(macro["unique_id"])
    assert undocumented == []


def test_every_model_has_a_key_test(documented):
    """Every model has a key test: a tracked table's staging and marts through its
    tracked_table_checks test (on the current-state mart, reading all three), the rest through
    primary_key."""
    manifest = documented
    tested = set()
    for node in manifest["nodes"].values():
        if node["resource_type"] != "test":
            continue
        name = node.get("test_metadata", {}).get("name")
        if name in ("primary_key", "unique"):
            tested.update(node["depends_on"]["nodes"])
        elif name == "tracked_table_checks":
            table = node["test_metadata"]["kwargs"]["table"]
            assert {f"model.sqlserver_cdc.{table}_current", f"model.sqlserver_cdc.{table}_history"} <= set(
                node["depends_on"]["nodes"]), node["unique_id"]
            tested.update(node["depends_on"]["nodes"])
    models = {uid for uid, n in manifest["nodes"].items() if n["resource_type"] == "model"}
    assert sorted(models - tested) == ["model.sqlserver_cdc.cdc_quarantine"]  # a list of problems, no key


def test_every_data_test_is_scoped_to_the_run_or_an_audit(documented):
    """docs/operations.md "Checks: batch and audit": a data test on a model reads what the run changed (a
    scope token in its `where`, or the tracked tables' checks, scoped by the run's plan) or
    carries the tag cdc_audit, which incremental runs leave out; otherwise every run would scan a
    whole table. The one exception reads the captured-columns metadata, whose size is that of
    the declarations."""
    manifest = documented
    unscoped = []
    for node in manifest["nodes"].values():
        if node["resource_type"] != "test" or not any(d.startswith("model.") for d in node["depends_on"]["nodes"]):
            continue
        if ("__cdc_" in (node["config"].get("where") or "") or "cdc_audit" in node["config"]["tags"]
                or node.get("test_metadata", {}).get("name") == "tracked_table_checks"):
            continue
        unscoped.append(node["name"])
    assert unscoped == ["declared_ordinals_match_captured_columns"]


def test_a_declaration_mistake_is_an_error_naming_the_table_and_the_field():
    declared = yaml.safe_load((PROJECT_DIR / "dbt_project.yml").read_text())["vars"]["cdc_tracked_tables"]
    bad = {**declared["customers"], "columns": [*declared["customers"]["columns"],
                                                 {"name": "location", "type": "geography", "ordinal": 9}]}
    with pytest.raises(AssertionError, match="tracked table 'customers': column 'location' has type 'geography', "
                                             "which is not a supported SQL Server type"):
        compile_sql("{{ sqlserver_cdc.tracked_table('customers') }}", {"cdc_tracked_tables": {**declared, "customers": bad}})
    # a misspelt option is not ignored in silence
    with pytest.raises(AssertionError, match="tracked table 'customers': unknown field 'soft_delete' \\(known: channel, "):
        compile_sql("{{ sqlserver_cdc.tracked_table('customers') }}",
                    {"cdc_tracked_tables": {**declared, "customers": {**declared["customers"], "soft_delete": True}}})


@pytest.mark.parametrize(("change", "message"), [
    ({"column": "[desc]"}, "column name '\\[desc\\]' is not a plain identifier; name it with letters, digits and underscores"),
    ({"column": "o'name"}, "column name 'o'name' is not a plain identifier"),
    ({"column": "Order Date"}, "column name 'Order Date' is not a plain identifier.*source_name: 'Order Date'"),
    ({"column": "operation"}, "column name 'operation' is one the package adds to staging and the marts"),
    ({"column": "_batch_id"}, "column name '_batch_id' is one the package adds"),
    ({"column": "current_date"}, "column name 'current_date' is a Spark SQL literal or function"),
    ({"column": "EMAIL"}, "two columns are named 'EMAIL' but for case"),
    ({"source_name": " Notes"}, "column 'extra': source_name must be the column's name in the exports and events, a non-empty"),
    ({"source_name": "E-Mail", "and": "e-mail"}, "two columns have the source name 'e-mail' but for case"),
    ({"capture_instance": "dbo_o'name"}, "capture_instance 'dbo_o'name' holds a quote, backslash or control character"),
    ({"capture_instance": "dbo\\x"}, "capture_instance 'dbo.*x' holds a quote"),
])
def test_a_declared_name_that_generated_sql_cannot_carry_is_refused_naming_it(change, message):
    """Issue "Nothing lost in silence": a declared column named [desc] or o'name used to fail with
    a parse error inside generated SQL; it is refused at declaration with the remedy."""
    declared = yaml.safe_load((PROJECT_DIR / "dbt_project.yml").read_text())["vars"]["cdc_tracked_tables"]
    table = dict(declared["customers"])
    if "column" in change:
        table["columns"] = [*table["columns"], {"name": change["column"], "type": "int", "ordinal": 99}]
    elif "source_name" in change:  # a column's name in the exports: any text, but a blank edge or two alike
        table["columns"] = [*table["columns"], {"name": "extra", "source_name": change["source_name"], "type": "int", "ordinal": 98},
                            *([{"name": "extra2", "source_name": change["and"], "type": "int", "ordinal": 99}] if "and" in change else [])]
    else:
        table.update(change)
    with pytest.raises(AssertionError, match=f"tracked table 'customers': {message}"):
        compile_sql("{{ sqlserver_cdc.tracked_table('customers') }}", {"cdc_tracked_tables": {**declared, "customers": table}})


@pytest.mark.parametrize(("change", "message"), [
    ({"key": []}, "tracked table 'customers' in dbt_project.yml: key: List should have at least 1 item"),
    ({"channel": "change_table"}, "channel: Input should be 'change_tables', 'ces' or 'debezium'"),
    ({"capture_instances": [{"name": "dbo_c", "columns": ["customer_id"]}]}, "give capture_instance or capture_instances"),
    ({"columns": [{"name": "customer_id", "type": "int"}]}, "every column needs its ordinal"),
    ({"columns": [{"name": "customer_id", "type": "int", "ordinal": "first"}]}, "columns.0.ordinal: Input should be a valid integer"),
    ({"columns": [{"name": True, "type": "int", "ordinal": 1}]}, "columns.0.name: Input should be a valid string"),
])
def test_the_runner_refuses_a_declaration_it_cannot_read_naming_the_table_and_field(tmp_path, change, message):
    """Before Spark starts (runner/project/config.py), with the field's path; the dbt side checks the rest."""
    from cdc_simulator.tables import tracked_tables
    from runner.errors import UsageError

    config = yaml.safe_load((PROJECT_DIR / "dbt_project.yml").read_text())
    config["vars"]["cdc_tracked_tables"]["customers"].update(change)
    (tmp_path / "dbt_project.yml").write_text(yaml.safe_dump(config))
    with pytest.raises(UsageError, match=re.escape(message)):
        tracked_tables(tmp_path)


def test_the_projects_yaml_files_round_trip_unchanged_through_the_editor(tmp_path):
    """init and scaffold edit dbt_project.yml and the models' YAML in place (runner/project/tables.py
    edit_yaml): rewriting any of them without a change gives the same bytes."""
    import shutil

    from runner.project.yaml_edit import edit_yaml

    files = [PROJECT_DIR / "dbt_project.yml", *sorted((PROJECT_DIR / "models").rglob("*.yml"))]
    assert len(files) > 5
    for i, source in enumerate(files):
        copy = tmp_path / f"{i}.yml"
        shutil.copy(source, copy)
        assert edit_yaml(copy, lambda document: True)
        assert copy.read_text() == source.read_text(), source


def test_the_installed_dbt_is_the_one_readme_says_and_its_pins_agree():
    """README "Versions": dbt-core and dbt-spark 1.11 (no 1.12.x after 1.12.0 installs from PyPI
    alone), with sqlparse 0.6 or later (its denial-of-service fixes); what a fresh install
    resolves (CI's set-up is one) and what the project and package metadata allow agree."""
    from importlib.metadata import version

    from packaging.version import Version

    assert Version(version("dbt-core")).release[:2] == (1, 11), version("dbt-core")
    assert Version(version("dbt-spark")).release[:2] == (1, 11), version("dbt-spark")
    assert Version(version("sqlparse")) >= Version("0.6"), version("sqlparse")
    project = yaml.safe_load((PROJECT_DIR / "dbt_project.yml").read_text())
    assert project["require-dbt-version"] == [">=1.10.0", "<1.12.0"]
    pins = (PROJECT_DIR / "pyproject.toml").read_text()
    assert '"dbt-core>=1.10,<1.12"' in pins and '"sqlparse>=0.6"' in pins
    readme = (PROJECT_DIR / "README.md").read_text()
    assert "**dbt-core stays on 1.11**" in readme and "2026-12-19" in readme
