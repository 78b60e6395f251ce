"""One runner at a time per warehouse: an exclusive lock on a file, held for the whole run.

The lock is the operating system's (`flock`): it is released when the holding process ends, however
it ends, so a lock left by a killed run is never stale; the file also records who holds it (host,
pid, start time, target), which a second runner prints when it refuses to start. A runner that
acquires a file still naming a holder knows that holder died without releasing it and says so.

A run's Spark lives in a JVM of its own, which outlives a Python process killed alone (it stops
only when it notices its parent's pipe closed, and may still be committing). The holder record
names that JVM (pid and start time, `record_jvm`), and a runner that takes over a lock whose
holder died first waits for that JVM to end, then kills it (`stop_orphan_jvm`), so two runs never
write the warehouse at once, whatever was killed.

Where the lock lives: for an embedded (`session`) target, in its state folder beside the metastore
and warehouse; for a server target (`thrift`, `http`, a Spark Connect `session`), in the project's `.state/locks/`, one file per
server address and schema, so it excludes runners on this machine only (docs/operations.md "One runner at a
time").
"""

from __future__ import annotations

import fcntl
import json
import os
import signal
import socket
import time
from datetime import datetime, timezone
from pathlib import Path

from runner.errors import RunnerError


class WarehouseBusy(RunnerError):
    """Another runner holds the warehouse (exit 2: nothing was decided about the data)."""


def state_dir(project_dir: Path) -> Path:
    """The embedded warehouse's folder: SQLSERVER_CDC_STATE_DIR, default `.state` in the project."""
    state = Path(os.environ.get("SQLSERVER_CDC_STATE_DIR", ".state"))
    return state if state.is_absolute() else project_dir / state


def lock_path(target, project_dir: Path) -> Path:
    if target.method == "session" and not target.remote:
        return state_dir(project_dir) / "runner.run.lock"
    server = target.remote or target.address  # a server's warehouse (Thrift, http, Spark Connect)
    safe = "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in f"{server}-{target.schema}")
    return project_dir / ".state" / "locks" / f"{target.name}-{safe}.lock"


class RunnerLock:
    def __init__(self, path: Path, target_name: str, command: str = "run"):
        self.path = path
        self.target_name = target_name
        self.command = command  # what holds it: run, serve, audit, maintain, status (the refusal names it)
        self._fd: int | None = None
        self._holder: dict = {}
        self.previous: dict | None = None  # the holder recorded by a run that died holding it

    def acquire(self, wait_seconds: float = 0, progress=None) -> RunnerLock:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        deadline = time.monotonic() + wait_seconds
        said = False
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                holder = _describe(_read(fd))
                if time.monotonic() >= deadline:
                    os.close(fd)
                    waited = f" after waiting {wait_seconds:g} s" if wait_seconds else ""
                    raise WarehouseBusy(
                        f"another runner holds this warehouse{waited}: {holder} (lock {self.path}); "
                        "wait for it to finish, or pass --wait SECONDS") from None
                if progress is not None and not said:
                    progress.step(f"waiting up to {wait_seconds:g} s for the runner holding this warehouse: {holder}")
                    said = True
                time.sleep(min(1.0, max(0.05, deadline - time.monotonic())))
        self._fd = fd
        self.previous = _read(fd)
        self._holder = {"host": socket.gethostname(), "pid": os.getpid(), "command": self.command,
                        "started_at": datetime.now(timezone.utc).isoformat(timespec="seconds"), "target": self.target_name}
        _write(fd, self._holder)
        return self

    def record_jvm(self, pid: int) -> None:
        """Names the run's JVM in the holder record (see the module's docstring)."""
        if self._fd is not None and (started := process_start(pid)) is not None:
            self._holder = {**self._holder, "jvm_pid": pid, "jvm_started": started}
            _write(self._fd, self._holder)

    def stop_orphan_jvm(self, wait_seconds: float = 10.0) -> str | None:
        """When the previous holder died holding the lock and its JVM (same host, same pid and
        start time) still runs: waits up to wait_seconds for it to end, then kills it; returns
        what happened, or None."""
        holder = self.previous or {}
        pid, started = holder.get("jvm_pid"), holder.get("jvm_started")
        if not pid or holder.get("host") != socket.gethostname() or process_start(pid) != started:
            return None
        deadline = time.monotonic() + wait_seconds
        while process_start(pid) == started and time.monotonic() < deadline:
            time.sleep(0.1)
        if process_start(pid) != started:
            return f"waited for the JVM (pid {pid}) of the runner that ended without releasing the lock to end"
        _kill(pid, started)
        return (f"killed the JVM (pid {pid}) of the runner that ended without releasing the lock: it still ran "
                f"{wait_seconds:g} s after taking over")

    def kill_jvm(self) -> str | None:
        """Kills this runner's own JVM (record_jvm), also a frozen one, and waits until it is gone;
        says so, or None when none was recorded or it has ended."""
        pid, started = self._holder.get("jvm_pid"), self._holder.get("jvm_started")
        if not pid or process_start(pid) != started:
            return None
        _kill(pid, started)
        return f"killed the run's JVM (pid {pid})"

    def release(self) -> None:
        if self._fd is None:
            return
        _write(self._fd, None)  # an empty file: released cleanly
        fcntl.flock(self._fd, fcntl.LOCK_UN)
        os.close(self._fd)
        self._fd = None

    def __enter__(self):
        return self

    def __exit__(self, *_) -> None:
        self.release()


def _kill(pid: int, started: int) -> None:
    """SIGKILL to the process (pid, start time), then waits until it is gone."""
    os.kill(pid, signal.SIGKILL)
    while process_start(pid) == started:
        time.sleep(0.05)


def describe_previous(lock: RunnerLock) -> str | None:
    """A line about the holder a killed run left in the lock file, if any."""
    if not lock.previous:
        return None
    return f"took over the lock of a runner that ended without releasing it ({_describe(lock.previous)})"


def process_start(pid: int) -> int | None:
    """A process's start time (clock ticks after boot, from /proc: with the pid it names one
    process, whatever pid reuse does), or None when it does not run or /proc has no record."""
    try:
        stat = Path(f"/proc/{int(pid)}/stat").read_text()
    except (OSError, ValueError):
        return None
    fields = stat[stat.rindex(")") + 2:].split()
    return None if fields[0] == "Z" else int(fields[19])


def _read(fd: int) -> dict | None:
    os.lseek(fd, 0, os.SEEK_SET)
    text = os.read(fd, 4096).decode("utf-8", "replace").strip()
    if not text:
        return None
    try:
        return json.loads(text)
    except ValueError:
        return {"unreadable": text[:200]}


def _write(fd: int, holder: dict | None) -> None:
    os.ftruncate(fd, 0)
    os.lseek(fd, 0, os.SEEK_SET)
    if holder is not None:
        os.write(fd, (json.dumps(holder) + "\n").encode())
    os.fsync(fd)


def _describe(holder: dict | None) -> str:
    if not holder:
        return "a runner that has not recorded itself yet"
    if "unreadable" in holder:
        return f"unreadable holder record {holder['unreadable']!r}"
    what = f"python -m runner {holder['command']}, " if holder.get("command") else ""
    return (f"{what}pid {holder.get('pid')} on host {holder.get('host')}, started {holder.get('started_at')}, "
            f"target {holder.get('target')}")
