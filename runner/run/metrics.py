"""The resident runner's metrics and health, in Prometheus' exposition format (`prometheus_client`),
served over HTTP on 127.0.0.1 by default: `/metrics` and `/healthz` (docs/operations.md "The resident
runner"). Every value comes from what a run reported (its summary rows, the same the run ledger
holds), so the metrics and the ledger agree."""

from __future__ import annotations

import threading
import time
from datetime import datetime, timezone
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, make_wsgi_app

from runner.run.watchdog import Activity, run_limit

PREFIX = "sqlserver_cdc"
# how a run ended, as runs_total counts them: succeeded, nothing_to_do (nothing new: no Spark job),
# failed (a refused file, a failed model or check: the service goes on), error (any other)
STATUSES = ("succeeded", "nothing_to_do", "failed", "error")


class Metrics:
    """The service's metrics (a registry of its own) and its health: unhealthy while the run in
    progress (`activity`, runner/run/watchdog.py) has run longer than the run limit (`run_limit`
    seconds, or watchdog.run_limit's default for `tables` declared tables and the longest
    successful run), after `max_failures` failed runs in a row, or when no run succeeded for
    `stale_after` seconds (default: the run limit and two intervals of `every` seconds, the most a
    healthy service goes between successes)."""

    def __init__(self, max_failures: int = 3, stale_after: float | None = None, run_limit: float | None = None,
                 every: float | None = None, tables: int = 0, activity: Activity | None = None):
        self.registry = CollectorRegistry()
        self.max_failures, self.stale_after, self.given_limit = max_failures, stale_after, run_limit
        self.every, self.tables, self.activity = every, tables, activity
        self.failures_in_a_row = 0
        self.started = time.time()
        self.last_success: float | None = None
        self.longest: float | None = None  # the longest successful run's seconds
        self.last_error = ""
        # per tracked table and database it reads (docs/tables.md "Several databases"; '' in a
        # project of one database, which Prometheus reads as no label)
        r, table = self.registry, ["table", "database"]
        self.runs = Counter(f"{PREFIX}_runs", "Runs by how they ended", ["status"], registry=r)
        self.duration = Histogram(f"{PREFIX}_run_duration_seconds", "Wall time of a run", registry=r,
                                  buckets=(0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800))
        self.last_run = Gauge(f"{PREFIX}_last_run_timestamp_seconds", "When the last run ended", registry=r)
        self.last_ok = Gauge(f"{PREFIX}_last_success_timestamp_seconds", "When the last run that succeeded ended "
                             "(nothing new counts)", registry=r)
        self.in_a_row = Gauge(f"{PREFIX}_consecutive_failures", "Runs that failed in a row", registry=r)
        self.healthy = Gauge(f"{PREFIX}_healthy", "1 when /healthz answers 200", registry=r)
        self.healthy.set_function(lambda: 1 if self.health()[0] else 0)
        self.in_progress = Gauge(f"{PREFIX}_run_in_progress_seconds", "How long the run in progress has run "
                                 "(0: none)", registry=r)
        self.in_progress.set_function(lambda: (self.activity and self.activity.age()) or 0)
        self.limit = Gauge(f"{PREFIX}_run_limit_seconds", "A run in progress longer than this makes /healthz "
                           "answer 503", registry=r)
        self.limit.set_function(lambda: self.run_limit()[0])
        self.lag = Gauge(f"{PREFIX}_table_lag_seconds", "How far the commit time a table's current-state mart reached "
                         "lags the capture high-water mark (change tables)", table, registry=r)
        self.headroom = Gauge(f"{PREFIX}_table_retention_headroom_seconds", "Seconds until SQL Server's cleanup reaches "
                              "the table's first change not applied (change tables)", table, registry=r)
        self.applied = Counter(f"{PREFIX}_table_changes_applied", "Changes applied to the table's marts", table, registry=r)
        self.landed = Counter(f"{PREFIX}_table_rows_landed", "Rows staged for the table", table, registry=r)
        self.quarantined = Counter(f"{PREFIX}_table_rows_quarantined", "Rows quarantined for the table", table, registry=r)
        for status in STATUSES:
            self.runs.labels(status)
        # per table the runner writes (docs/operations.md "Maintenance"): from each maintenance pass
        rel = ["relation"]
        self.passes = Counter(f"{PREFIX}_maintenance_passes", "Maintenance passes by how they ended (completed, "
                              "yielded: stopped between two tables for a run that fell due, failed)", ["status"],
                              registry=r)
        for status in ("completed", "yielded", "failed"):
            self.passes.labels(status)
        self.pass_seconds = Gauge(f"{PREFIX}_maintenance_pass_seconds", "Wall time of the last maintenance pass",
                                  registry=r)
        self.files = Gauge(f"{PREFIX}_table_files", "Live data files of the table (DESCRIBE DETAIL numFiles)", rel,
                           registry=r)
        self.bytes = Gauge(f"{PREFIX}_table_bytes", "Live bytes of the table (DESCRIBE DETAIL sizeInBytes)", rel,
                           registry=r)
        self.reclaimable = Gauge(f"{PREFIX}_table_reclaimable_bytes", "Bytes on disk beyond the live ones (removed files "
                                 "and deletion vectors VACUUM deletes once the retention has passed), as measured "
                                 "after the table's last maintenance", rel, registry=r)
        self.maintained_at = Gauge(f"{PREFIX}_table_last_maintenance_timestamp_seconds", "When the table's last "
                                   "maintenance started", rel, registry=r)
        self.maintenance_seconds = Gauge(f"{PREFIX}_table_last_maintenance_seconds", "How long the table's last "
                                         "maintenance took", rel, registry=r)

    def record(self, status: str, seconds: float, summary: list[dict] = ()) -> None:
        """A run's end: its status (STATUSES), wall time and summary rows (runner/run/cli.py
        run_pipeline's: tracked_table, source_database, rows_landed, quarantined, changes_applied,
        lag_seconds, headroom_seconds)."""
        now = time.time()
        self.runs.labels(status).inc()
        self.duration.observe(seconds)
        self.last_run.set(now)
        if status in ("succeeded", "nothing_to_do"):
            self.failures_in_a_row, self.last_success, self.last_error = 0, now, ""
            self.last_ok.set(now)
            if status == "succeeded":
                self.longest = max(self.longest or 0.0, seconds)
        else:
            self.failures_in_a_row += 1
        self.in_a_row.set(self.failures_in_a_row)
        for row in summary:
            name = (row["tracked_table"], row.get("source_database") or "")
            self.applied.labels(*name).inc(int(row.get("changes_applied") or 0))
            self.landed.labels(*name).inc(int(row.get("rows_landed") or 0))
            self.quarantined.labels(*name).inc(int(row.get("quarantined") or 0))
            for gauge, field in ((self.lag, "lag_seconds"), (self.headroom, "headroom_seconds")):
                if row.get(field) is not None:
                    gauge.labels(*name).set(row[field])

    def maintained(self, result, seconds: float) -> None:
        """A maintenance pass's figures (runner/run/maintain.py Pass): every table's files and bytes
        (after the pass for those it maintained), what the maintained ones may reclaim, when and how long."""
        self.passes.labels("yielded" if result.left else "completed").inc()
        self.pass_seconds.set(seconds)
        done = {row["relation"]: row for row in result.done}
        for relation, state in result.facts.tables.items():
            row = done.get(relation)
            self.files.labels(relation).set(row["files_after"] if row else state.files)
            self.bytes.labels(relation).set(row["bytes_after"] if row else state.bytes)
            if row:
                self.reclaimable.labels(relation).set(max(int(row["disk_bytes_after"]) - int(row["bytes_after"]), 0))
                self.maintained_at.labels(relation).set(_epoch(row["started_at"]))
                self.maintenance_seconds.labels(relation).set(float(row["seconds"]))
            elif state.last is not None:
                if state.last.reclaimable is not None:
                    self.reclaimable.labels(relation).set(state.last.reclaimable)
                self.maintained_at.labels(relation).set(state.last.at.replace(tzinfo=timezone.utc).timestamp())

    def maintenance_failed(self, reason: str) -> None:
        self.passes.labels("failed").inc()
        self.last_maintenance_error = reason

    def failed(self, status: str, seconds: float, reason: str, summary: list[dict] = ()) -> None:
        """A run that failed (`reason`), with what it applied before (its summary rows)."""
        self.last_error = reason
        self.record(status, seconds, summary)

    def run_limit(self) -> tuple[float, str]:
        """The seconds after which the run in progress is hung, and where the figure comes from."""
        return run_limit(self.given_limit, self.longest, self.tables)

    def hung(self) -> str | None:
        """Why the run in progress is hung (it has run longer than the run limit), else None."""
        age = self.activity.age() if self.activity else None
        limit, source = self.run_limit()
        if age is None or age <= limit:
            return None
        return f"the run in progress has run {age:.0f} s, over the limit of {limit:g} s ({source}); it is at " \
               + self.activity.describe()

    def health(self) -> tuple[bool, str]:
        """(healthy, why): unhealthy while the run in progress is hung, after max_failures failed
        runs in a row, or when the last success (or the start) is older than the stale limit."""
        if hung := self.hung():
            return False, hung
        if self.max_failures and self.failures_in_a_row >= self.max_failures:
            return False, f"{self.failures_in_a_row} runs failed in a row; the last: {self.last_error}"
        since = self.last_success or self.started
        stale = self.stale_after or (self.run_limit()[0] + 2 * self.every if self.every else None)
        if stale and time.time() - since > stale:
            source = "--stale-after" if self.stale_after else "the run limit and two --every intervals"
            return False, f"no run succeeded for {time.time() - since:.0f} s, over the limit of {stale:g} s ({source})"
        return True, "ok"

    def serve_http(self, host: str, port: int) -> WSGIServer:
        """Serves /metrics and /healthz (200 "ok", or 503 and the reason) on host:port from a
        daemon thread; returns the server (its server_port is the port bound, for port 0)."""
        metrics_app = make_wsgi_app(self.registry)

        def app(environ, start_response):
            if environ.get("PATH_INFO") == "/healthz":
                ok, why = self.health()
                start_response("200 OK" if ok else "503 Service Unavailable", [("Content-Type", "text/plain")])
                return [(why + "\n").encode()]
            return metrics_app(environ, start_response)

        class Quiet(WSGIRequestHandler):
            def log_message(self, *args) -> None:  # a scrape every few seconds is not news
                pass

        server = make_server(host, port, app, handler_class=Quiet)
        threading.Thread(target=server.serve_forever, name="metrics", daemon=True).start()
        return server


def _epoch(text: str) -> float:
    """Seconds since the epoch of a UTC time as the maintenance ledger writes it."""
    return datetime.fromisoformat(text).replace(tzinfo=timezone.utc).timestamp()
