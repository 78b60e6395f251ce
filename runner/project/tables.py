"""What the tracked-table declarations (runner/project/config.py TableDeclaration, read from
dbt_project.yml, the one place they live) ask of the project: each table's thin model files,
written and checked, and the columns its exports must carry."""

from __future__ import annotations

from pathlib import Path

from runner.errors import UsageError
from runner.project.config import declared_databases, table_databases, tracked_table_declarations


def exported_columns(project_dir: Path) -> dict[str, list[str]]:
    """Per landing folder of a declared capture instance (`change_tables/<instance>`, lower case,
    in `databases/<database>/` for each database it is declared in but the default one), the
    captured columns its exports must carry by their source names (lower case): the instance's
    `columns`, or the table's declared columns when it has one capture instance."""
    expected = {}
    databases = declared_databases(project_dir)
    for name, table in tracked_table_declarations(project_dir).items():
        if table.channel == "change_tables":
            source = {c.name.lower(): c.source for c in table.columns}
            for db in table_databases(name, table, databases)[0]:
                for instance, columns in table.instances:
                    folder = f"change_tables/{instance.lower()}"
                    expected[f"{db.folder}{folder}"] = [source.get(c.lower(), c).lower() for c in columns or (
                        c.name for c in table.columns)]
    return expected


def model_files(name: str, channel: str) -> dict[str, str]:
    """The three thin model files of a tracked table, where docs/tables.md "Declaring a tracked
    table" puts them, each with the one macro call it holds."""
    return {
        f"models/staging/{channel}/stg_{channel}__{name}.sql": f"{STAGING_MACROS[channel]}('{name}')",
        f"models/marts/{name}/{name}_current.sql": f"current_state('{name}')",
        f"models/marts/{name}/{name}_history.sql": f"history('{name}')",
    }


def check_model_files(project_dir: Path) -> None:
    """Every declared tracked table has its three thin model files somewhere under models/ (dbt
    would otherwise report the missing staging model against the cdc_quarantine view that reads
    it). Raises UsageError naming the table and the missing files."""
    present = {p.name for p in (project_dir / "models").rglob("*.sql")}
    problems = []
    for name, t in tracked_table_declarations(project_dir).items():
        names = [Path(f).name for f in model_files(name, t.channel)]
        if missing := [n for n in names if n not in present]:
            problems.append(f"tracked table '{name}' has no model file {', '.join(missing)}")
    if problems:
        raise UsageError("; ".join(problems) + " (docs/tables.md \"Declaring a tracked table\" shows them; "
                         "`python -m runner scaffold` writes them for change-table instances)")


# The thin model file of each channel's staging model, as docs/tables.md "Declaring a tracked table" shows.
STAGING_MACROS = {"change_tables": "stage_change_table", "ces": "stage_ces_table",
                  "debezium": "stage_debezium_table"}
def write_model_files(project_dir: Path, name: str, channel: str) -> list[str]:
    """Writes the three thin model files of a tracked table (model_files), unless a file of that
    name exists anywhere under models/; returns what it wrote."""
    present = {p.name for p in (project_dir / "models").rglob("*.sql")}
    written = []
    for relative, call in model_files(name, channel).items():
        path = project_dir / relative
        if path.name not in present:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(f"{{{{ sqlserver_cdc.{call} }}}}\n")
            written.append(relative)
    return written
