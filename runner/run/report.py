"""Progress lines and the closing summary table."""

from __future__ import annotations

import sys
import time
from decimal import Decimal

import agate

from runner.run.plan import dbkey
from runner.run.watchdog import Activity
from runner.sources import landing


class Progress:
    """The progress lines; the last is also what the current run is doing (`activity`)."""

    def __init__(self, stream=None, dbt_nodes: bool = False, started: float | None = None):
        self.stream = stream  # default: sys.stdout when a step is printed (whatever it is then)
        # whether dbt prints its line per node too (--verbose); otherwise only its errors
        self.dbt_nodes = dbt_nodes
        # time.monotonic() the steps' elapsed seconds count from (a caller's, for one clock)
        self.started = time.monotonic() if started is None else started
        self.activity = Activity()

    def step(self, message: str) -> None:
        self.activity.step(message)
        elapsed = time.monotonic() - self.started
        print(f"[sqlserver_cdc {elapsed:6.1f}s] {message}", file=self.stream or sys.stdout, flush=True)


def _lag(seconds: object) -> str:
    if seconds is None:
        return "-"
    s = int(Decimal(str(seconds)))
    return f"{s // 3600}h{s % 3600 // 60:02d}m{s % 60:02d}s" if s >= 60 else f"{s}s"


def _headroom(seconds: object) -> str:
    if seconds is None:
        return "-"
    s = int(Decimal(str(seconds)))
    return ("-" if s < 0 else "") + (f"{abs(s) // 86400}d{abs(s) % 86400 // 3600:02d}h" if abs(s) >= 86400
                                      else f"{abs(s) // 3600}h{abs(s) % 3600 // 60:02d}m")


def headroom_warnings(rows: list[dict[str, object]], retentions: dict, min_hours: float | None) -> list[str]:
    """A WARNING per change-table table (and database) whose retention headroom (finish_run's
    headroom_seconds: how long until SQL Server's cleanup reaches its first change not applied yet)
    is under `min_hours`, or already past (always): the run after cleanup gets there stops the
    table at a gap. Also why a landed cdc_jobs retention was not taken. retentions: each
    database's (runner/run/plan.py Plan.retention)."""
    lines = [f"WARNING {r.problem}" for _, r in sorted(retentions.items()) if r.problem]
    for r in rows:
        seconds = r.get("headroom_seconds")
        if seconds is None:
            continue
        db = r.get("database_id") or ""
        retention = retentions.get(db) or next(iter(retentions.values()))
        source = "from cdc_jobs" if retention.landed is not None else "the default: land a cdc_jobs export to give yours"
        if seconds < 0 or (min_hours is not None and seconds < min_hours * 3600):
            when = (f"may already have removed changes it has not applied ({_headroom(-seconds)} ago)" if seconds < 0
                    else f"reaches its first change not applied yet in {_headroom(seconds)}")
            where = f" ({r['source_database']})" if r.get("source_database") else ""
            lines.append(f"WARNING {r['tracked_table']}{where}: SQL Server's cleanup (retention {retention.minutes} "
                         f"minutes, {source}) {when}; run more often, or raise the retention (sys.sp_cdc_change_job "
                         "@job_type = 'cleanup', @retention = ...)")
    return lines


def summary_table(rows: list[dict[str, object]]) -> agate.Table:
    """The closing summary, a row per tracked table (and, in a project of several databases, per
    database it reads: a `database` column after the table's)."""
    several = any(r.get("source_database") for r in rows)
    names = ["tracked table", *(["database"] if several else []), "rows landed", "quarantined", "changes applied",
             "LSN reached", "lag behind capture", "retention headroom", "current rows", "history versions"]
    types = [agate.Text(), *([agate.Text()] if several else []), agate.Number(), agate.Number(), agate.Number(),
             agate.Text(), agate.Text(), agate.Text(), agate.Number(), agate.Number()]
    data = [
        (
            r["tracked_table"],
            *([r.get("source_database") or "-"] if several else []),
            r["rows_landed"],
            r["quarantined"],
            r["changes_applied"],
            ("0x" + str(r["lsn_reached"])) if r["lsn_reached"] else "-",
            _lag(r["lag_seconds"]) + ("" if r["advanced"] else " (not advanced)"),
            _headroom(r.get("headroom_seconds")),
            r["current_rows"],
            r["history_versions"],
        )
        for r in rows
    ]
    return agate.Table(data, names, types)


def print_table(table: agate.Table, stream=sys.stdout) -> None:
    table.print_table(max_columns=None, max_column_width=40, output=stream)


def stream_line(channel: str, s: dict[str, object]) -> str:
    """The one-line account of an event channel's stream in this run (macro stream_summary)."""
    if channel == "ces":
        return (f"CES stream: {s['lines_landed']} lines landed, {s['duplicates']} duplicates dropped, "
                f"{s['pending_messages']} split messages waiting for segments, {s['quarantined']} lines "
                f"quarantined ({s['quarantined_total']} in all)")
    return (f"Debezium stream: {s['lines_landed']} lines landed, {s['duplicates']} replayed events dropped, "
            f"{s['tombstones']} tombstones ignored, {s['quarantined']} lines quarantined "
            f"({s['quarantined_total']} in all)")


def landing_lines(facts, plan) -> list[str]:
    """What landing refused or held back, and what holds the change-table cut (runner/run/plan.py's
    facts and plan: refused and waiting files, columns ignored, export gaps, the table holding the cut, stale
    snapshots, instances without manifests)."""
    lines = [f"REFUSED {reason}" for reason in facts.refused]
    lines += [f"note: {item}" for item in facts.ignored]
    lines += waiting_lines(facts.waiting)
    for db, cut in sorted(plan.export.items()):
        where = f" of {facts.database_label(db)}" if db else ""
        for gap in cut.gaps:
            lines.append(f"export gap in {gap}{where}: the cut stays below the gap until the missing export lands")
        held = cut.held_back
        if held:
            reached = f"reaches 0x{held['exported_lsn']}" if held["exported_lsn"] else "has no manifest landed yet"
            stop = f"stops at 0x{held['exported_lsn']}" if held["exported_lsn"] else "waits"
            lines.append(f"cut{where} held back by {held['table']}: its export ({held['capture_instance']}) {reached}, "
                         f"capture{where} has reached 0x{held['captured_lsn']}; every change-table mart{where} {stop} until "
                         "its next export lands (the summary's lag shows how far behind)"
                         + ("; the other databases' marts go on" if db or len(plan.export) > 1 else ""))
        if cut.without_manifest:
            lines.append(f"WARNING capture instance(s) {', '.join(cut.without_manifest)}{where} land without export "
                         "manifests: their marts advance to the largest landed lsn_time_mapping LSN, so rows of theirs "
                         "exported later than that mapping land below the marts' watermark and make a run rebuild those "
                         "marts from staging (docs/landing.md \"Export manifests\")")
    lines += [f"WARNING snapshot of {stale}" for stale in plan.stale_snapshots]
    return lines


def waiting_lines(waiting) -> list[str]:
    """One line per folder and kind of wait (runner/sources/landing.py WAITS) for the files that could not
    land yet ({file, reason, wait}, macro land_files): what they are, up to three names, the remedy."""
    groups: dict[tuple[str, str], list[dict]] = {}
    for item in waiting:
        parts = item["file"].split("/")
        depth = 4 if parts[0] == "databases" else 2  # [databases/<database>/]<kind>/<entity>
        folder = "/".join(parts[:depth]) if len(parts) > depth else "/".join(parts[:-1]) or parts[0]
        groups.setdefault((folder, item.get("wait") or ""), []).append(item)
    lines = []
    for (folder, wait), items in sorted(groups.items()):
        names = [i["file"].split("/")[-1] for i in items]
        shown = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
        if wait in landing.WAITS:
            what, remedy = landing.WAITS[wait]
            manifests = "".join(f"; {i['file'].split('/')[-1]} {i['reason']}" for i in items
                                if wait == "incomplete" and i["file"].endswith(landing.MANIFEST_SUFFIX))
            lines.append(f"waiting: {folder}/: {len(items)} file(s) {what} ({shown}{manifests}): {remedy}")
        else:
            lines += [f"waiting: {i['file']}: {i['reason']}" for i in items]
    return lines


def window_lines(facts, plan) -> list[str]:
    """Each channel's window bound, and what the run builds: the tables with changes in their
    window (the others cost nothing), the tables stopped at a gap."""
    lines = []
    for channel, db in sorted({(t.channel, db) for t in facts.tables for db in t.databases}):
        where, key = f", {facts.database_label(db)}" if db else "", dbkey(db, channel)
        if plan.upper_lsn.get(key):
            lines.append(f"window ({channel}{where}): changes up to LSN 0x{plan.upper_lsn[key]} (one bound for its tables)")
        else:
            lines.append(f"window ({channel}{where}): nothing landed yet to apply")
    applying = sorted(name for name, t in plan.tables.items() if t.apply)
    if plan.status != "nothing_to_do" and not plan.full_refresh and not plan.select:
        unchanged = len(plan.tables) - len(applying) - sum(1 for t in plan.tables.values() if t.gap or t.waits)
        lines.append(f"{len(applying)} table(s) with changes in their window"
                     + (f" ({', '.join(applying[:10])}{', ...' if len(applying) > 10 else ''})" if applying else "")
                     + f"; {unchanged} without: not built, their watermarks move to the bound")
    lines += [f"{name}: changes or their commit times landed at or below its marts' watermark (from LSN 0x{t.late}: a "
              "late or corrected export, or lsn_time_mapping rows of changes applied without a commit time): both marts "
              "are rebuilt from staging, so that they are applied" for name, t in sorted(plan.tables.items())
              if t.late and t.apply]
    lines += [f"STOPPED {t.gap}" for t in plan.tables.values() if t.gap]
    lines += [f"waiting: {t.waits}" for _, t in sorted(plan.tables.items()) if t.waits]
    return lines
