"""A run that does not end (docs/operations.md "A run that hangs"): what the current run is doing
(`Activity`: how long it has run, its last step, the dbt invocation and the nodes running), the
deadline after which it is abandoned (`Deadline`: `run --timeout`, `serve --timeout`), the limit
after which the resident runner reports it hung (`run_limit`), and the abandonment itself
(`abandon`): as a kill would, the run's Spark stopped and the process ended at once, so nothing is
half-applied (every write is one Delta commit, watermarks are recorded last) and the next run
applies what it had not recorded."""

from __future__ import annotations

import math
import os
import sys
import threading
import time
from collections.abc import Callable
from typing import NoReturn

# the resident runner's run limit (serve --run-limit): never below FLOOR seconds; before the
# service's first successful run FLOOR plus PER_TABLE seconds per declared table (a first run may
# be an initial load, or a catch-up of every table after a long stop), then MULTIPLE times its
# longest successful run
FLOOR = 900.0
PER_TABLE = 60.0
MULTIPLE = 5.0


def run_limit(given: float | None, longest: float | None, tables: int) -> tuple[float, str]:
    """The seconds after which a run in progress is reported hung, and where the figure comes from."""
    if given:
        return given, "--run-limit"
    if longest is None:
        return FLOOR + PER_TABLE * tables, (f"before a first successful run: {FLOOR:g} s and {PER_TABLE:g} s for each of "
                                            f"{tables} declared table(s); --run-limit sets it")
    if MULTIPLE * longest <= FLOOR:
        return FLOOR, f"the floor: {MULTIPLE:g} x the longest successful run ({longest:.0f} s) is less; --run-limit sets it"
    return float(math.ceil(MULTIPLE * longest)), (f"{MULTIPLE:g} x the longest successful run ({longest:.0f} s); "
                                                  "--run-limit sets it")


class Activity:
    """What the current run is doing, for the deadline's message and the service's health; read
    from other threads (the deadline's, the metrics server's) while the run writes it."""

    def __init__(self, clock: Callable[[], float] = time.monotonic):
        self.clock = clock
        self._lock = threading.Lock()
        self._started: float | None = None
        self._step = ""
        self._invocation: tuple[str, float] | None = None
        self._nodes: dict[str, tuple[str, float]] = {}

    def begin(self) -> None:
        with self._lock:
            self._started, self._step, self._invocation, self._nodes = self.clock(), "", None, {}

    def end(self) -> None:
        with self._lock:
            self._started, self._invocation, self._nodes = None, None, {}

    def step(self, message: str) -> None:
        """A progress line of the run (report.Progress.step)."""
        with self._lock:
            self._step = message

    def invoking(self, what: str | None) -> None:
        """A dbt invocation starts (`dbt build`, `dbt run-operation <macro>`), or ended (None)."""
        with self._lock:
            self._invocation = (what, self.clock()) if what else None
            self._nodes = {}

    def dbt_event(self, event) -> None:
        """dbt's callback: a node starts or finishes (NodeStart, NodeFinished)."""
        name = event.info.name
        if name not in ("NodeStart", "NodeFinished"):
            return
        node = event.data.node_info
        with self._lock:
            if name == "NodeStart":
                self._nodes[node.unique_id] = (f"{node.resource_type} {node.node_name}", self.clock())
            else:
                self._nodes.pop(node.unique_id, None)

    def age(self) -> float | None:
        """Seconds since the current run began; None between runs."""
        with self._lock:
            return None if self._started is None else self.clock() - self._started

    def describe(self) -> str:
        """Where the current run is: the dbt nodes running (or the dbt invocation), and its last step."""
        with self._lock:
            now = self.clock()
            if self._nodes:
                nodes = sorted(self._nodes.values(), key=lambda n: n[1])
                where = (f"{self._invocation[0] if self._invocation else 'dbt'}, "
                         + " and ".join(f"{what} (running {now - since:.0f} s)" for what, since in nodes))
            elif self._invocation:
                where = f"{self._invocation[0]} (running {now - self._invocation[1]:.0f} s)"
            else:
                where = ""
            step = f'the step "{self._step}"' if self._step else "its start"
            return f"{where}, in {step}" if where else step


class Deadline:
    """Abandons a run that has run longer than `seconds` (expire(what it was doing)); one thread for
    a process's life, watching the Activity's current run."""

    def __init__(self, seconds: float, activity: Activity, expire: Callable[[str], None], poll: float = 0.5):
        self.seconds, self.activity, self.expire, self.poll = seconds, activity, expire, poll
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="sqlserver_cdc-deadline", daemon=True)

    def start(self) -> Deadline:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()

    def _watch(self) -> None:
        while not self._stop.wait(self.poll):
            age = self.activity.age()
            if age is not None and age > self.seconds:
                self.expire(self.activity.describe())
                return


def abandon(progress, line: str, stop_spark: Callable[[], str | None], release: Callable[[], None],
            code: int) -> NoReturn:
    """Ends the process at once, as a kill would: says `line`, stops the run's Spark
    (stop_spark: kills the run's own JVM, or interrupts its statements on a server, and says what it
    did), releases the runner lock and exits with `code`, whatever the other threads are doing
    (a thread blocked in a call to a frozen JVM never returns)."""
    progress.step(line)
    try:
        said = stop_spark()
        if said:
            progress.step(said)
        release()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
