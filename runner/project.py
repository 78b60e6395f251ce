"""Reads the tracked-table declarations from dbt_project.yml (the one place they live), and
copies the project with other declarations (the tests and the benchmark use such copies)."""

from __future__ import annotations

import re
import shutil
from dataclasses import dataclass
from pathlib import Path

import yaml

from runner.config import tracked_table_declarations
from runner.errors import UsageError


@dataclass(frozen=True)
class Column:
    name: str
    type: str
    ordinal: int


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
    """The declared tracked tables (runner/config.py checks them). With several capture instances
    a column's ordinal is optional: its position (docs/tables.md "Capture-instance changes")."""
    specs = []
    for name, table in tracked_table_declarations(project_dir).items():
        columns = tuple(Column(c.name, c.type, c.ordinal if c.ordinal is not None else i)
                        for i, c in enumerate(table.columns, 1))
        if table.channel == "change_tables":
            specs.append(TableSpec(name, table.instances[-1][0], tuple(table.key), columns, demo=table.demo))
        else:
            source = (table.source_database, table.source_schema, table.source_table)
            specs.append(TableSpec(name, None, tuple(table.key), columns, table.channel, source, table.demo))
    return specs


def exported_columns(project_dir: Path) -> dict[str, list[str]]:
    """Per landing folder of a declared capture instance (`change_tables/<instance>`, lower case),
    the captured columns its exports must carry (lower case): the instance's `columns`, or the
    table's declared columns when it has one capture instance."""
    expected = {}
    for table in tracked_table_declarations(project_dir).values():
        if table.channel == "change_tables":
            for instance, columns in table.instances:
                expected[f"change_tables/{instance.lower()}"] = [c.lower() for c in columns or (
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
    for t in tracked_tables(project_dir):
        names = [Path(f).name for f in model_files(t.name, t.channel)]
        if missing := [n for n in names if n not in present]:
            problems.append(f"tracked table '{t.name}' has no model file {', '.join(missing)}")
    if problems:
        raise UsageError("; ".join(problems) + " (docs/tables.md \"Declaring a tracked table\" shows them; "
                         "`python -m runner scaffold` writes them for change-table instances)")


# The thin model file of each channel's staging model, as docs/tables.md "Declaring a tracked table" shows.
STAGING_MACROS = {"change_tables": "stage_change_table", "ces": "stage_ces_table",
                  "debezium": "stage_debezium_table"}
_NOT_COPIED = {".venv", ".state", "landing", "target", "logs", "tests", ".git", "bench"}


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
        return [n for n in names if (top and n in _NOT_COPIED) or n.endswith(".egg-info") or n == "__pycache__"]

    shutil.copytree(source, destination, ignore=ignore)
    declared = [t.name for t in tracked_tables(destination)]
    if removed := (declared if replace else list(drop)):
        remove_tables(destination, removed)
    if tables:
        edit_yaml(destination / "dbt_project.yml", lambda document: document["vars"]["cdc_tracked_tables"].update(tables) or True)
    for name, table in tables.items():
        write_model_files(destination, name, table["channel"])
    return destination


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


def round_trip_yaml():
    """A YAML reader and writer that keeps a file's comments, quotes, flow style and indentation
    (the project's files round-trip unchanged: tests/pipeline/test_project.py)."""
    from ruamel.yaml import YAML

    rt = YAML()
    rt.preserve_quotes = True
    rt.width = 4096
    rt.indent(mapping=2, sequence=4, offset=2)
    rt.representer.add_representer(type(None), lambda r, _: r.represent_scalar("tag:yaml.org,2002:null", "null"))
    return rt


def edit_yaml(path: Path, edit) -> bool:
    """Applies `edit` to the YAML document of `path` in place (comments and layout kept); a blank
    line that separated two top-level sections stays even when what preceded it went. Returns
    whether `edit` changed anything (edit returns that)."""
    import io

    rt = round_trip_yaml()
    text = path.read_text()
    document = rt.load(text)
    if not edit(document):
        return False
    out = io.StringIO()
    rt.dump(document, out)
    lines = out.getvalue().splitlines(keepends=True)
    gaps = {line for before, line in zip(text.splitlines(keepends=True), text.splitlines(keepends=True)[1:])
            if not before.strip() and re.match(r"^[^\s#]", line)}
    for i in range(len(lines) - 1, 0, -1):
        if lines[i] in gaps and lines[i - 1].strip():
            lines.insert(i, "\n")
    path.write_text("".join(lines))
    return True


def _tail(node):
    """The innermost last block collection of `node`: where ruamel keeps the comment lines that
    follow the node, i.e. those before the next key (its `ca.end`)."""
    while True:
        last = (list(node.values()) if isinstance(node, dict) else list(node))[-1:] if len(node) else []
        if not last or not isinstance(last[0], (dict, list)) or not len(last[0]) or last[0].fa.flow_style():
            return node
        node = last[0]


def take_following_comments(node) -> list:
    """Takes the comment lines that follow `node` (see _tail) off it."""
    tail = _tail(node)
    tokens, tail.ca.end = list(tail.ca.end or []), []
    return tokens


def give_following_comments(node, tokens: list) -> None:
    tail = _tail(node)
    if tokens and tail.ca.comment is None:
        tail.ca.comment = [None, None]  # ruamel writes a collection's end comments only beside its own
    tail.ca.end = [*(tail.ca.end or []), *tokens]


def _delete_key(mapping, key: str) -> None:
    """Deletes a key of a block mapping with the comment lines that belong to it (those before it,
    which ruamel keeps on the previous key's node); the comment lines before the next key stay."""
    keys = list(mapping)
    i = keys.index(key)
    following = take_following_comments(mapping[key]) if isinstance(mapping[key], (dict, list)) and len(mapping[key]) else []
    if i > 0 and isinstance(mapping[keys[i - 1]], (dict, list)) and len(mapping[keys[i - 1]]):
        take_following_comments(mapping[keys[i - 1]])  # the deleted key's own comment lines
        give_following_comments(mapping[keys[i - 1]], following)
    elif i == 0:  # the comment lines before the first key are the deleted key's; the next key's follow it
        mapping.ca.comment = [None, following] if following and len(keys) > 1 else None
    del mapping[key]


def remove_tables(project_dir: Path, names: list[str]) -> list[str]:
    """Removes tracked tables from the project in place: each one's declaration in dbt_project.yml,
    its three thin model files (and a marts folder left empty) and its models' YAML entries (a YAML
    file left without models goes); the rest of every file, comments included, is kept. Returns
    what it removed, one line per kind of file."""
    declared = {t.name: t for t in tracked_tables(project_dir)}
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
