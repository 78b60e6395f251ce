"""A scheduled run that finds nothing new exits before starting Spark (docs/operations.md "The runner").

After a plain run (`run` without --full-refresh, --select or --upper-lsn) of an embedded
(`session`) target succeeds, the runner records a fingerprint of what it saw, beside the lock in
the state folder:
- the landing folder's files (path, size, modification time), listed before the run began;
- the project's and the runner's files (dbt_project.yml, profiles.yml, models, macros, seeds,
  runner/*.py) and the target as profiles.yml renders it (schema, Spark settings), before the run
  began;
- the warehouse's Delta commit logs (the names of every `_delta_log` file), as the run left them.

The next run computes the same fingerprint first. When it is equal, nothing was landed since,
no table of the warehouse has a commit since, and the project is the same, so the marts are at the
bounds that run left them at and `begin_run` would find nothing to do: the run says so, repeats what
that run said about files that wait, and exits 0 without Spark (and without a ledger row). Any other run deletes the record before it starts, so
a run that fails or is killed never leaves one. Server targets (`thrift`, `http`) keep no record:
their warehouse is not on this machine; nor do runs whose warehouse is a URI (on a cluster's
file system), or whose landing folder is one (it is listed only once Spark runs, runner/sources/folders.py).
"""

from __future__ import annotations

import hashlib
import json
from datetime import datetime, timezone
from pathlib import Path

from runner.sources import landing

PROJECT_FILES = ("dbt_project.yml", "profiles.yml")
PROJECT_FOLDERS = ("models", "macros", "seeds")


def _digest(items) -> str:
    h = hashlib.sha256()
    for item in items:
        h.update(repr(item).encode())
        h.update(b"\0")
    return h.hexdigest()


def landing_digest(landing_dir: Path, listed: dict[str, tuple[int, int]] | None = None) -> str:
    """The landing folder's files: `listed` when the run has listed them (landing.listing), else listed now."""
    if listed is None:
        listed = landing.listing(landing_dir)
    return _digest([str(landing_dir.resolve()), *sorted((path, *stamp) for path, stamp in listed.items())])


def project_digest(project_dir: Path, target) -> str:
    """The project's and the runner's files, and the target as profiles.yml renders it now (its
    schema comes from the environment)."""
    files = [project_dir / name for name in PROJECT_FILES]
    for folder in PROJECT_FOLDERS:
        files += sorted(p for p in (project_dir / folder).rglob("*") if p.is_file())
    files += sorted(Path(__file__).resolve().parents[1].rglob("*.py"))  # the runner package
    return _digest([repr(target), *((str(p), p.read_bytes() if p.is_file() else None) for p in files)])


def warehouse_digest(warehouse: Path) -> str:
    return _digest(sorted(str(p.relative_to(warehouse)) for p in warehouse.glob("*/*/_delta_log/*")))


def warehouse_dir(target, project_dir: Path) -> Path:
    path = Path(target.spark_conf.get("spark.sql.warehouse.dir", "spark-warehouse"))
    return path if path.is_absolute() else project_dir / path


class LastRun:
    """The fingerprint record of the last successful plain run (see the module's docstring)."""

    def __init__(self, record: Path, project_dir: Path, landing_dir: Path, target,
                 listed: dict[str, tuple[int, int]] | None = None):
        self.record, self.warehouse = record, warehouse_dir(target, project_dir)
        # what the run starts from, taken before it looks at anything (`listed`: the run's first
        # listing of the landing folder, when it made one)
        self.before = {"landing": landing_digest(landing_dir, listed), "project": project_digest(project_dir, target)}

    def unchanged_since(self) -> dict | None:
        """The record when nothing changed since it was written, else None."""
        try:
            recorded = json.loads(self.record.read_text())
        except (OSError, ValueError):
            return None
        now = {**self.before, "warehouse": warehouse_digest(self.warehouse)}
        return recorded if all(recorded.get(k) == v for k, v in now.items()) else None

    def forget(self) -> None:
        self.record.unlink(missing_ok=True)

    def remember(self, notes: list[str] = ()) -> None:
        """Records the fingerprint after a successful run (the warehouse as it left it), with what the
        run said about files that wait (`notes`): a run that finds nothing changed says it again."""
        finished = datetime.now(timezone.utc).isoformat(timespec="seconds")
        content = {**self.before, "warehouse": warehouse_digest(self.warehouse), "finished_at": finished,
                   "notes": list(notes)}
        partial = self.record.with_suffix(".tmp")
        partial.write_text(json.dumps(content))
        partial.replace(self.record)
