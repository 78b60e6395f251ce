"""A newcomer's path from a fresh clone to their own tables (README "Your own tables", docs/tables.md
"Your own tables"), end to end on a fresh copy of the project, with every command README's block
shows: make clean, init, scaffold with a chosen name, two batches of two tables that are not the
demo's (the second table declared after the first batch landed, between two runs of one process;
the second batch with export manifests that leave a file waiting, which the run names, and the
run after it repeats), the marts against the Python reference, dbt show."""

from __future__ import annotations

import re
import shlex
import subprocess
import uuid

import pytest

from cdc_simulator import landing_writer
from cdc_simulator.simulate import Simulator
from cdc_simulator.tables import Column, TableSpec, tracked_tables
from runner.run import cli
from runner.run.dbt import Dbt
from tests.conftest import PROJECT_DIR, Pipeline, copy_project
from tests.expected import check_marts

LEDGER = TableSpec("gl_accounts", "dbo_LedgerAccounts", ("account_id",), (
    Column("account_id", "int", 1), Column("account_name", "nvarchar(80)", 2), Column("balance", "decimal(18,2)", 3),
    Column("opened_on", "date", 4), Column("is_closed", "bit", 5)))
INVOICE_LINES = TableSpec("invoice_items", "sales_InvoiceLines", ("invoice_id", "line_no"), (
    Column("invoice_id", "int", 1), Column("line_no", "smallint", 2), Column("sku", "char(10)", 3),
    Column("quantity", "int", 4), Column("amount", "money", 5), Column("note", "nvarchar(max)", 6)))
TABLES = [INVOICE_LINES, LEDGER]
FORMATS = {"gl_accounts": "parquet", "invoice_items": "csv"}


def _readme_steps() -> list[str]:
    """The commands of README's "Your own tables" block, in order."""
    text = (PROJECT_DIR / "README.md").read_text()
    block = text.split("### Your own tables")[1].split("```sh\n")[1].split("```")[0]
    return [line.split("  #")[0].strip() for line in block.splitlines() if line.strip() and not line.startswith("#")]


def _documented_columns(mart: str) -> set[str]:
    """The mart columns docs/marts.md "Mart columns by kind of version" documents (its tables)."""
    text = (PROJECT_DIR / "docs" / "marts.md").read_text().split("### Mart columns by kind of version")[1]
    history = text.split("`<table>_history`:")[1].split("\n\n")[1]
    current = text.split("`<table>_current`")[1].split("\n\n")[1]
    if mart == "history":
        return {m for line in history.splitlines()[2:] for m in re.findall(r"^\| `(\w+)`", line)}
    return set(re.findall(r"`(\w+)`", current.splitlines()[0]))


@pytest.mark.scenario
def test_a_newcomer_gets_from_a_fresh_clone_to_their_own_tables(spark, tmp_path, monkeypatch, capfd):
    steps = _readme_steps()
    assert [" ".join(s.split()[:4]) if s.startswith("python") else " ".join(s.split()[:2]) for s in steps] == [
        "make clean", ". .venv/bin/activate", "python -m runner init", "python -m runner scaffold", "python -m runner run",
        "dbt show"]
    make_clean, _, init, scaffold, run, show = steps
    project = copy_project(tmp_path / "clone", {})  # what a clone holds (no .venv, .state, landing)
    landing = project / "landing"
    here = ["--project-dir", str(project)]

    # init refuses while the demo's data is there, then `make clean` and init remove the demo
    (landing / "change_tables" / "dbo_customers").mkdir(parents=True)
    with monkeypatch.context() as env:
        env.setenv("SQLSERVER_CDC_STATE_DIR", str(tmp_path / "state"))  # no warehouse in the clone yet
        assert cli.main([*shlex.split(init)[3:], *here]) == 2
        assert "still hold(s) the demo's data" in capfd.readouterr().out
        subprocess.run(shlex.split(make_clean), cwd=project, check=True, capture_output=True)
        assert not landing.exists()
        assert cli.main([*shlex.split(init)[3:], *here]) == 0
        out = capfd.readouterr().out
        assert cli.main([*shlex.split(init)[3:], *here]) == 0
        assert "nothing to remove" in capfd.readouterr().out
    assert tracked_tables(project) == []
    assert "removed 12 model files" in out and "removed 12 YAML entries" in out
    assert sorted(p.name for p in (project / "models").rglob("*.sql")) == [
        "cdc_quarantine.sql", "stg_cdc_metadata__captured_columns.sql", "stg_cdc_metadata__change_tables.sql",
        "stg_cdc_metadata__lsn_time_mapping.sql", "stg_ces__events.sql", "stg_debezium__events.sql"]
    comments = [line for line in (PROJECT_DIR / "dbt_project.yml").read_text().splitlines()
                if line.strip().startswith("#") and not line.startswith("    ")]
    assert set(comments) <= set((project / "dbt_project.yml").read_text().splitlines()), "init keeps the comments"
    from cdc_tooling import cli as tooling

    assert tooling.main(["demo", *here]) == 2  # it would write simulated changes of the user's tables
    assert "the demo runs on the demo's tables only" in capfd.readouterr().out

    # the metadata exports, then scaffold as README shows it, naming the second table too (by capture instance)
    sim = Simulator(TABLES, seed=33)
    txs = sim.run(60)
    landing_writer.write_captured_columns(landing, TABLES)
    landing_writer.write_change_tables(landing, "metadata", TABLES, {t.capture_instance: txs[0].begin_lsn for t in TABLES})
    chosen = shlex.split(scaffold)[3:]
    assert chosen == ["scaffold", "--name", "dbo.LedgerAccounts=gl_accounts"]
    assert cli.main([*chosen, "--tables", "dbo_LedgerAccounts", *here]) == 0  # the ledger first
    capfd.readouterr()
    assert tracked_tables(project) == [LEDGER]

    # batch 1, run as README shows it: the invoice lines' export lands too, though not declared yet
    schema = "n_" + uuid.uuid4().hex[:8]
    pipeline = Pipeline(spark, schema, landing, project_dir=project)  # sets the schema the profile reads
    landing_writer.write_batch(landing, "b1", TABLES, txs[:25], FORMATS)
    assert cli.main([*shlex.split(run)[3:], *here]) == 0
    capfd.readouterr()
    check_marts(pipeline, sim, txs[24].commit_lsn, tables=[LEDGER], transactions=txs[:25])

    # the second table declared between two runs of this process (as beside a resident runner,
    # `serve`): the next run re-parses the project and builds it from every export landed
    assert cli.main([*chosen, "sales_InvoiceLines=invoice_items", *here]) == 0
    capfd.readouterr()
    declared = {t.name: t for t in tracked_tables(project)}
    assert declared == {t.name: t for t in TABLES}
    files = {p: p.read_bytes() for p in [project / "dbt_project.yml", *(project / "models").rglob("*")] if p.is_file()}
    assert cli.main(["scaffold", *here]) == 0  # again, without --name: the chosen names stay, nothing changes
    out = capfd.readouterr().out
    assert "gl_accounts: unchanged" in out and "invoice_items: unchanged" in out
    assert {p: p.read_bytes() for p in files} == files

    # batch 2 with export manifests; a later export of the ledger without one waits, named with the remedy
    landing_writer.write_batch(landing, "b2", TABLES, txs[25:50], FORMATS,
                               manifest=(txs[24].commit_lsn, txs[49].commit_lsn))
    landing_writer.write_export(landing, "b3", LEDGER, txs[50:], "csv")
    assert cli.main([*shlex.split(run)[3:], *here]) == 0
    waiting = [line for line in capfd.readouterr().out.splitlines() if "waiting:" in line]
    assert len(waiting) == 1 and waiting[0].split("] ", 1)[1].startswith(
        "waiting: change_tables/dbo_LedgerAccounts/: 1 file(s) that no export manifest lists, in a folder that holds "
        "export manifests (b3.csv): once a capture instance's folder holds a manifest"), waiting
    check_marts(pipeline, sim, txs[49].commit_lsn, tables=TABLES, transactions=txs[:50])
    # the next scheduled run finds nothing changed, and says again what waits
    assert cli.main([*shlex.split(run)[3:], *here]) == 0
    out = capfd.readouterr().out
    assert "nothing new landed since the run" in out and waiting[0].split("] ", 1)[1] in out

    # dbt show as README shows it (the test's schema for cdc)
    sql = shlex.split(show)[3]
    assert sql == "select * from cdc.gl_accounts_current"
    rows = Dbt(project, "local").query(sql.replace("cdc.", f"{schema}."))
    assert len(rows) == len(pipeline.table("gl_accounts_current", "account_id")) > 0

    # docs/marts.md documents every column the marts have besides the declared ones
    for table in TABLES:
        declared_columns = {c.name for c in table.columns}
        for mart in ("current", "history"):
            columns = set(spark.table(f"{schema}.{table.name}_{mart}").columns) - declared_columns
            assert columns == _documented_columns(mart), (mart, columns ^ _documented_columns(mart))
