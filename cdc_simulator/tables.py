"""The simulator's shape of a tracked table (the demo's data, the tests' scenarios and the
benchmark generate changes for it), read from the project's declarations (runner/project/config.py
TableDeclaration, the runner's one shape of a tracked table)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from runner.project.config import tracked_table_declarations


@dataclass(frozen=True)
class Column:
    name: str
    type: str
    ordinal: int
    source: str = ""  # its name in the exports and events (a declaration's source_name), when not `name`

    @property
    def exported(self) -> str:
        return self.source or self.name


@dataclass(frozen=True)
class TableSpec:
    name: str
    capture_instance: str | None
    key: tuple[str, ...]
    columns: tuple[Column, ...]
    channel: str = "change_tables"
    # where CES events of the table come from (data.eventsource db, schema, tbl)
    source: tuple[str | None, str, str] | None = None
    demo: bool = False  # declared `demo: true`: one of the demo's tables, which `python -m runner init` removes

    @property
    def non_key(self) -> list[Column]:
        return [c for c in self.columns if c.name not in self.key]


def tracked_tables(project_dir: Path) -> list[TableSpec]:
    """The declared tracked tables (runner/project/config.py checks them). With several capture instances
    a column's ordinal is optional: its position (docs/tables.md "Capture-instance changes")."""
    specs = []
    for name, table in tracked_table_declarations(project_dir).items():
        columns = tuple(Column(c.name, c.type, c.ordinal if c.ordinal is not None else i, c.source_name or "")
                        for i, c in enumerate(table.columns, 1))
        if table.channel == "change_tables":
            specs.append(TableSpec(name, table.instances[-1][0], tuple(table.key), columns, demo=table.demo))
        else:
            source = (table.source_database, table.source_schema, table.source_table)
            specs.append(TableSpec(name, None, tuple(table.key), columns, table.channel, source, table.demo))
    return specs
