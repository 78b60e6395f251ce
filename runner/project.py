"""Reads the tracked-table declarations from dbt_project.yml (the one place they live)."""

from __future__ import annotations

from pathlib import Path

import yaml

from runner.errors import UsageError
from runner.simulate import Column, TableSpec


def tracked_tables(project_dir: Path) -> list[TableSpec]:
    path = project_dir / "dbt_project.yml"
    if not path.exists():
        raise UsageError(f"no dbt_project.yml in {project_dir}; pass --project-dir to the project folder")
    declared = (yaml.safe_load(path.read_text()).get("vars") or {}).get("cdc_tracked_tables") or {}
    specs = []
    for name, table in declared.items():
        try:
            columns = tuple(Column(c["name"], str(c["type"]), int(c["ordinal"])) for c in table["columns"])
            specs.append(TableSpec(name, table["capture_instance"], tuple(table["key"]), columns))
        except (KeyError, TypeError, ValueError) as exc:
            raise UsageError(f"tracked table '{name}' in dbt_project.yml is incomplete: {exc}") from exc
    return specs
