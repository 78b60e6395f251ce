"""`python -m runner init`: removes tracked tables (the demo's) from a project in place, their
declarations, model files and YAML entries, keeping everything else; and copies of the project
with other declarations (the tests and the benchmark use such copies)."""

from __future__ import annotations

import shutil
from pathlib import Path

import yaml

from runner.errors import UsageError
from runner.project.config import tracked_table_declarations
from runner.project.tables import model_files, write_model_files
from runner.project.yaml_edit import _delete_key, edit_yaml
from runner.spark import jars as jars_module


def remove_tables(project_dir: Path, names: list[str]) -> list[str]:
    """Removes tracked tables from the project in place: each one's declaration in dbt_project.yml,
    its three thin model files (and a marts folder left empty) and its models' YAML entries (a YAML
    file left without models goes); the rest of every file, comments included, is kept. Returns
    what it removed, one line per kind of file."""
    declared = tracked_table_declarations(project_dir)
    unknown = [n for n in names if n not in declared]
    if unknown:
        raise UsageError(f"no tracked table {', '.join(unknown)} is declared in dbt_project.yml")

    def undeclare(document) -> bool:
        tables = document["vars"]["cdc_tracked_tables"]
        for name in names:
            _delete_key(tables, name)
        return bool(names)

    edit_yaml(project_dir / "dbt_project.yml", undeclare)
    files = []
    for name in names:
        for relative in model_files(name, declared[name].channel):
            found = [p for p in (project_dir / "models").rglob(Path(relative).name)]
            for path in found:
                path.unlink()
                files.append(path.relative_to(project_dir).as_posix())
                if path.parent.name == name and not any(path.parent.iterdir()):
                    path.parent.rmdir()
    entries = _drop_model_properties(project_dir, {model for name in names for model in (
        f"stg_{declared[name].channel}__{name}", f"{name}_current", f"{name}_history")})
    return [f"declarations of {', '.join(names)} in dbt_project.yml", f"{len(files)} model files ({', '.join(files)})",
            f"{len(entries)} YAML entries ({', '.join(entries)})"]


def _drop_model_properties(project_dir: Path, models: set[str]) -> list[str]:
    """Removes the YAML entries (docs and data tests) of `models` from the project's models folder,
    in place; a file left without any model entry and nothing else goes. Returns the entries removed."""
    removed = []
    for yml in sorted((project_dir / "models").rglob("*.yml")):
        def drop(document, where: str = yml.relative_to(project_dir).as_posix()) -> bool:
            entries = (document or {}).get("models") or []
            gone = [m for m in entries if m.get("name") in models]
            for entry in gone:
                entries.remove(entry)
            removed.extend(f"{m['name']} ({where})" for m in gone)
            return bool(gone)

        if edit_yaml(yml, drop):
            left = yaml.safe_load(yml.read_text()) or {}
            if not left.get("models") and not set(left) - {"version", "models"}:
                yml.unlink()
    return removed


_NOT_COPIED = {".venv", ".state", "landing", "landing-kafka", "target", "logs", "tests", ".git", "bench", ".cluster",
               ".kafka", ".hdfs", "metastore_db", "spark-warehouse", "derby.log"}


def copy_project(source: Path, destination: Path, tables: dict[str, dict], replace: bool = False,
                 drop: tuple[str, ...] = ()) -> Path:
    """A copy of the project at `source` with `tables` declared (added to the declared ones, or
    instead of them with replace=True) and their thin model files written, exactly as docs/tables.md's
    "Declaring a tracked table" tells a user to do. With replace, the replaced tables' model files
    and model YAML go; the caller documents the new models if it wants their tests. `drop` names
    declared tables to remove with their model files and model YAML entries, keeping the rest
    documented and tested."""
    source = source.resolve()

    def ignore(folder: str, names: list[str]) -> list[str]:
        top = Path(folder) == source
        # of the jar folder only what a plain dbt session in the copy loads (the profile's
        # .jars/driver); the runner loads the jars of its own checkout
        jars = Path(folder) == source / ".jars"
        return [n for n in names if (top and n in _NOT_COPIED) or (jars and n != jars_module.DRIVER)
                or n.endswith(".egg-info") or n == "__pycache__"]

    shutil.copytree(source, destination, ignore=ignore)
    declared = list(tracked_table_declarations(destination))
    if removed := (declared if replace else list(drop)):
        remove_tables(destination, removed)
    if tables:
        edit_yaml(destination / "dbt_project.yml", lambda document: document["vars"]["cdc_tracked_tables"].update(tables) or True)
    for name, table in tables.items():
        write_model_files(destination, name, table["channel"])
    return destination
