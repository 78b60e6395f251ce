"""A maintenance pass (docs/operations.md "Maintenance"): `python -m runner maintain` (and `status`,
which reports what a pass would do), and `serve`'s passes between runs. The facts come from the
macro maintenance_facts, the decisions from runner/run/maintenance.py, and each table's work is one
`maintain_table` operation, so a pass that must yield (a run fell due) stops between two tables."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime

from runner.project.config import maintenance_settings, tracked_table_declarations
from runner.run import maintenance as m
from runner.run.plan import EVENT_MODELS, METADATA_MODELS


def maintained(project_dir, raw_schema: str) -> list[dict[str, str]]:
    """The tables the runner writes ({relation, kind}; a model by its name, the ledgers by their
    kind): the raw table, every staging model and mart of the declared tables, the run ledger, the
    watermarks and the maintenance ledger. (cdc_quarantine is a view; the seeds are written once.)"""
    tables = tracked_table_declarations(project_dir)
    channels = {t.channel for t in tables.values()}
    found = [{"relation": f"{raw_schema}.landed_rows", "kind": "raw"}]
    found += [{"relation": model, "kind": "staging"} for model in METADATA_MODELS]
    found += [{"relation": model, "kind": "staging"} for channel, model in EVENT_MODELS.items() if channel in channels]
    for name, t in sorted(tables.items()):
        found.append({"relation": f"stg_{t.channel}__{name}", "kind": "staging"})
        found += [{"relation": f"{name}_{mart}", "kind": "mart"} for mart in ("history", "current")]
    found += [{"relation": kind, "kind": kind} for kind in ("ledger", "watermarks", "maintenance")]
    return found


@dataclass
class Facts:
    """What maintenance_facts reported, read."""

    tables: dict[str, m.TableState]
    staged_through: dict[str, str]  # each staging model's last batch taken in
    manifests_from: str = ""
    first_run: datetime | None = None
    last_maintained: datetime | None = None


def read_facts(report: dict) -> Facts:
    tables = {}
    for t in report["tables"]:
        last = t.get("last")
        tables[t["relation"]] = m.TableState(
            t["relation"], t["kind"], int(t["files"]), int(t["bytes"]), t.get("modified"), dict(t.get("properties") or {}),
            m.Last(m.parse_time(last["at"]), int(last.get("files_after") or 0),
                   None if last.get("compacted_files") is None else int(last["compacted_files"]),
                   m.parse_time(last.get("vacuumed_at")), last.get("modified_after"), m.parse_time(last.get("removed_through")),
                   None if last.get("reclaimable") is None else max(int(last["reclaimable"]), 0))
            if last and last.get("at") else None)
    return Facts(tables, {model: batch or "" for model, batch in (report.get("staged_through") or {}).items()},
                 report.get("manifests_from") or "", m.batch_time(report.get("first_run") or ""),
                 m.parse_time(report.get("last_maintained")))


@dataclass
class Pass:
    """A pass's outcome: the tables it maintained (the ledger rows maintain_table reported), the
    tasks it left for the next pass (it yielded to a run), and the facts it planned from."""

    facts: Facts
    tasks: list[m.Task]
    done: list[dict] = field(default_factory=list)
    left: list[m.Task] = field(default_factory=list)


def declared(project_dir) -> list[tuple[str, str, list[str]]]:
    """(name, channel, capture instances) of each declared table (the raw retention's sources)."""
    return [(name, t.channel, [i for i, _ in t.instances]) for name, t in sorted(tracked_table_declarations(project_dir).items())]


def plan_pass(facts: Facts, settings: m.Settings, now: datetime, tables: list[tuple[str, str, list[str]]]) -> list[m.Task]:
    """Every table's task of a pass, the ones with work first (runner/run/maintenance.py)."""
    raw = m.raw_cutoff(settings, now, m.raw_sources(tables, facts.staged_through), facts.manifests_from)
    tasks = [m.plan_table(state, settings, now, raw) for state in facts.tables.values()]
    return m.order(tasks, facts.tables)


def run_pass(dbt, project_dir, raw_schema: str, progress, now: Callable[[], datetime] = m.utcnow,
             yield_to: Callable[[], bool] = lambda: False, dry_run: bool = False) -> Pass:
    """One pass: the facts, the plan, then each task as one dbt operation, stopping between two
    tables when `yield_to()` says a run is due (the tasks left are the next pass's). dry_run:
    the plan only."""
    settings = maintenance_settings(project_dir)
    report = dbt.operation("sqlserver_cdc.maintenance_facts",
                           {"relations": maintained(project_dir, raw_schema)}).get("maintenance_facts")
    facts = read_facts(report)
    started = now()
    tasks = plan_pass(facts, settings, started, declared(project_dir))
    result = Pass(facts, tasks)
    for i, task in enumerate(tasks):
        if dry_run:
            break
        if yield_to():
            result.left = tasks[i:]
            progress.step(f"maintenance yields to a run that is due: {len(result.left)} table(s) left for the next pass")
            break
        progress.step(f"maintaining {task.relation}: {'; '.join(task.why)}")
        row = dbt.operation("sqlserver_cdc.maintain_table", {
            "relation": task.relation, "kind": task.kind, "reason": "; ".join(task.why), "properties": task.properties,
            "before": {"files": facts.tables[task.relation].files, "bytes": facts.tables[task.relation].bytes},
            "raw": {"before": task.raw.before, "sources": [
                {"kind": r.kind, "entities": list(r.entities) if r.entities else None, "through": r.through}
                for r in task.raw.sources]} if task.raw else None,
            "compact": task.compact, "vacuum": task.vacuum,
            "removed_through": task.removed_through.strftime("%Y-%m-%d %H:%M:%S.%f") if task.removed_through else None,
        }).get("maintain_table")
        result.done.append(row)
        progress.step(describe(row))
    if not dry_run and not result.left:
        dbt.operation("sqlserver_cdc.record_maintenance", {"at": started.strftime("%Y-%m-%d %H:%M:%S")})
    return result


def describe(row: dict) -> str:
    """A maintained table's line: files and bytes before and after, what VACUUM reclaimed."""
    said = [f"{row['files_before']} -> {row['files_after']} files",
            f"{_size(row['bytes_before'])} -> {_size(row['bytes_after'])} live"]
    if row.get("compacted"):
        said.append(f"compaction rewrote {row['compaction_files_removed']} file(s) into {row['compaction_files_added']}"
                    + (f", purging {row['deletion_vectors_purged']} deletion vector(s)" if row["deletion_vectors_purged"] else ""))
    if row.get("vacuumed"):
        said.append(f"VACUUM deleted {row['vacuum_files_deleted']} file(s), {_size(row['vacuum_bytes_deleted'])}")
    said.append(f"{_size(max(int(row['disk_bytes_after']) - int(row['bytes_after']), 0))} on disk reclaimable later")
    if row.get("raw_rows_deleted") is not None:
        said.append(f"{row['raw_rows_deleted']} landed rows past the raw retention deleted (held from {row['raw_held_from']})")
    return f"maintained {row['relation']} in {float(row['seconds']):.1f} s: " + ", ".join(said)


def _size(n) -> str:
    n = float(n or 0)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"


def status_table(result: Pass):
    """A row per table: its files and live bytes (now: after this pass), the bytes on disk beyond
    them that VACUUM may reclaim once the retention has passed (as measured after its last
    maintenance), when that was, and what is due (a status: what a pass would do; after a pass:
    what it did)."""
    import agate

    done = {row["relation"]: row for row in result.done}
    tasks = {t.relation: t for t in result.tasks}
    data = []
    for relation, state in sorted(result.facts.tables.items()):
        row = done.get(relation)
        files, live = (row["files_after"], row["bytes_after"]) if row else (state.files, state.bytes)
        reclaimable = (max(int(row["disk_bytes_after"]) - int(row["bytes_after"]), 0) if row
                       else state.last.reclaimable if state.last and state.last.reclaimable is not None else None)
        when = row["started_at"][:19] if row else (state.last.at.strftime("%Y-%m-%d %H:%M:%S") if state.last else "never")
        task = tasks.get(relation)
        due = "done: " + "; ".join(task.why) if row else ("; ".join(task.why) if task and not task.empty else "-")
        data.append((relation, state.kind, files, _size(live), "-" if reclaimable is None else _size(reclaimable), when, due))
    return agate.Table(data, ["table", "kind", "files", "live", "reclaimable", "last maintained", "due"],
                       [agate.Text(), agate.Text(), agate.Number(), agate.Text(), agate.Text(), agate.Text(), agate.Text()])
