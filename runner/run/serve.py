"""`python -m runner serve`: the resident runner (docs/operations.md "The resident runner").

One process keeps the SparkSession, dbt's parsed project and the JIT warm and makes normal runs
(the same lock, plan, ledger row, checks and outcome as `python -m runner run`) one at a time: at
start, every `--every` seconds, as soon as the landing folder's listing changed and then held
still for one `--poll` (a file still being written triggers no run until it settles), and as
soon as a Kafka source's end offsets moved (polled every `--poll`: new records, a new partition
or topic). A run with
nothing new since the last successful one starts no Spark job (runner/run/unchanged.py). A change
to the project (a table declared, a model edited) is taken by the next run: dbt re-parses a
project whose files changed (runner/run/dbt.py).

The warehouse's runner lock is held for the process's life, so a second `serve` or a `run`
beside it is refused (exit 2), or waits with `--wait`. A run that fails (a refused file, a failed
model or check, a usage error such as a bad declaration) is reported and the service goes on;
`--max-failures` failed runs in a row make `/healthz` answer 503 until a run succeeds, and so do a
run in progress longer than `--run-limit` and no successful run for `--stale-after` (runner/run/metrics.py);
`--timeout` abandons a run that long as a kill would and exits 2. When the SparkSession is gone the
process ends with exit 2, for its supervisor to restart it. SIGTERM or SIGINT: the current run
finishes, then the process exits 0; a second signal, or the first while the run in progress is
over its run limit, ends it at once, abandoning the run as a kill would (nothing half-applied: the
next start re-applies it)."""

from __future__ import annotations

import signal
import threading
import time
from dataclasses import dataclass, field
from typing import NoReturn

from runner.errors import EXIT_OK, InfrastructureError, PipelineFailed, RunnerError, UsageError
from runner.run.metrics import Metrics
from runner.run.watchdog import Activity


@dataclass
class Trigger:
    """When the service runs (see the module's docstring): at once, then every `every` seconds,
    when the landing folder's listing differs from the one the last run started from and is the
    same as the previous poll's (settled), and when the Kafka sources' end offsets differ from
    those the last run started from (a record is whole once Kafka shows it: no settling). A
    listing or offsets of None (no folder, a broker that does not answer) never trigger."""

    every: float
    next_due: float = 0.0
    ran_from: dict | None = None
    ran_offsets: dict | None = None
    previous: dict | None = field(default=None, repr=False)

    def due(self, now: float, listing: dict | None, offsets: dict | None = None) -> bool:
        settled, self.previous = listing is not None and listing == self.previous, listing
        return (now >= self.next_due or (settled and listing != self.ran_from)
                or (offsets is not None and offsets != self.ran_offsets))

    def pending(self, now: float, listing: dict | None, offsets: dict | None = None) -> bool:
        """Whether a run is due or about to be (new files, settled or not): what a maintenance pass
        yields to between two tables. Changes nothing."""
        return (now >= self.next_due or (listing is not None and listing != self.ran_from)
                or (offsets is not None and offsets != self.ran_offsets))

    def ran(self, now: float, listing: dict | None, offsets: dict | None = None) -> None:
        self.next_due, self.ran_from = now + self.every, listing
        if offsets is not None:
            self.ran_offsets = offsets


def _exit(progress, line: str, code: int) -> NoReturn:
    """The abandonment of a service without a Spark of its own to stop (the tests' loops)."""
    progress.step(line)
    raise SystemExit(code)


class Stop:
    """SIGTERM/SIGINT: the first sets the event (the loop ends after the current run), unless the
    run in progress is hung (`hung()` says why): then, as on a second signal, the run is abandoned at
    once (`abandon(line, exit code)`, runner/run/watchdog.py) and the process exits 0."""

    def __init__(self, progress, abandon=None, hung=lambda: None):
        self.event, self.progress, self.hung = threading.Event(), progress, hung
        self.abandon = abandon or (lambda line, code: _exit(progress, line, code))

    def __call__(self, signum, _frame) -> None:
        name = signal.Signals(signum).name
        if self.event.is_set():
            self.abandon(f"{name} again: stopping now, abandoning the current run (the next start applies it)", EXIT_OK)
        if why := self.hung():
            self.abandon(f"{name}: stopping now, abandoning the current run, which is hung ({why}); the next start "
                         "applies it", EXIT_OK)
        self.progress.step(f"{name}: stopping after the current run")
        self.event.set()

    def install(self) -> None:
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self)


def serve(args, progress, listing, run, alive, metrics: Metrics | None = None, offsets=None, abandon=None,
          tables: int = 0, maintain=None) -> int:
    """The service's loop (see the module's docstring): `listing()` lists the landing folder (None:
    there is none), `run(listed)` makes one run and returns (status, summary rows, why it failed
    or '') or raises the runner's errors, `alive()` tells whether the SparkSession still answers,
    `offsets()` (with Kafka sources) their end offsets (runner/sources/kafka.py EndOffsets.poll),
    `abandon(line, exit code)` ends the process at once (runner/run/cli.py abandoner), `tables`
    the declared tables (the default run limit), `maintain(yield_to)` a maintenance pass
    (runner/run/maintain.py run_pass: it stops between two tables when `yield_to()` says a run is
    due), made every --maintain-every seconds, between runs only; a pass that yielded goes on
    after the run. Each run and pass is the Activity of `progress`
    from its start to its end (the metrics' run in progress). Returns the exit code."""
    activity = getattr(progress, "activity", None) or Activity()
    metrics = metrics or Metrics(max_failures=args.max_failures, stale_after=args.stale_after, run_limit=args.run_limit,
                                 every=args.every, tables=tables, activity=activity)
    stop = Stop(progress, abandon, metrics.hung)
    stop.install()
    if args.metrics_port is not None:
        server = metrics.serve_http(args.metrics_host, args.metrics_port)
        progress.step(f"metrics on http://{args.metrics_host}:{server.server_port}/metrics, health on /healthz")
    trigger = Trigger(args.every)
    every = getattr(args, "maintain_every", None)
    next_pass = time.monotonic() + every if every else None
    progress.step(f"serving: a run now, every {args.every:g} s and when new files settle"
                  f"{' or Kafka records arrive' if offsets else ''} (polled every {args.poll:g} s)"
                  + (f"; maintenance between runs every {every:g} s" if maintain and every else ""))
    while not stop.event.is_set():
        listed, ends, now = listing(), offsets() if offsets else None, time.monotonic()
        if maintain and next_pass is not None and now >= next_pass and not trigger.pending(now, listed, ends):
            next_pass = _maintenance(progress, activity, metrics, maintain, every, lambda: trigger.pending(
                time.monotonic(), listing(), offsets() if offsets else None))
        elif trigger.due(now, listed, ends):
            trigger.ran(now, listed, ends)
            activity.begin()
            try:
                status, summary, reason = run(listed)
                if reason:
                    progress.step(f"FAILED: {reason}")
                    metrics.failed(status, time.monotonic() - now, reason, summary)
                else:
                    metrics.record(status, time.monotonic() - now, summary)
            except (PipelineFailed, UsageError) as exc:
                progress.step(f"FAILED: {exc}")
                metrics.failed("failed", time.monotonic() - now, str(exc))
            except RunnerError as exc:
                progress.step(f"FAILED: {exc}")
                if isinstance(exc, InfrastructureError) and not alive():
                    raise InfrastructureError(f"the SparkSession is gone ({exc}); the service ends for its supervisor "
                                              "to restart it") from None
                metrics.failed("error", time.monotonic() - now, str(exc))
            finally:
                activity.end()
            if not metrics.health()[0]:
                progress.step(f"unhealthy: {metrics.health()[1]}")
        stop.event.wait(args.poll)
    progress.step("stopped")
    return EXIT_OK


def _maintenance(progress, activity, metrics: Metrics, maintain, every: float, yield_to) -> float:
    """One maintenance pass between runs; returns when the next is due (at once after the run it
    yielded to, else `every` seconds on). A pass that fails is reported and the service goes on
    (its tables are as the last whole statement left them: the next pass takes them up again)."""
    started = time.monotonic()
    activity.begin()
    try:
        result = maintain(yield_to)
        metrics.maintained(result, time.monotonic() - started)
        return time.monotonic() if result.left else started + every
    except RunnerError as exc:
        progress.step(f"FAILED: maintenance: {exc}")
        metrics.maintenance_failed(str(exc))
        return started + every
    finally:
        activity.end()
