"""What the local test services (cdc_tooling/kafka_broker.py, cdc_tooling/hdfs.py) share: a JVM
started in a session of its own with its pid in a file, found again by that file and a marker of
its command line, and stopped with TERM, then KILL."""

from __future__ import annotations

import os
import signal
import socket
import sys
import time
from collections.abc import Callable
from pathlib import Path

from runner.errors import EXIT_OK, RunnerError, UsageError

HOST = "127.0.0.1"
# a service's log4j 2 configuration: warnings and errors, to the file {log}
LOG4J2 = """rootLogger.level = warn
rootLogger.appenderRef.file.ref = file
appender.file.type = File
appender.file.name = file
appender.file.fileName = {log}
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = %d{{yyyy-MM-dd HH:mm:ss}} %p %c{{1}}: %m%n
"""


class Service:
    """A local service's files in its folder `home` (set by the dataclass that mixes this in):
    `<NAME>.pid` and `<NAME>.log`; MARKER is in its command line."""

    NAME = ""
    MARKER = b""
    home: Path

    @property
    def pid_file(self) -> Path:
        return self.home / f"{self.NAME}.pid"

    @property
    def log(self) -> Path:
        return self.home / f"{self.NAME}.log"

    def pid(self) -> int | None:
        """The running service's process id, or None."""
        return running_pid(self.pid_file, self.MARKER)


def classpath(own: Path, borrowed: tuple[str, ...]) -> str:
    """A service's jars (the folder `own`, without an old slf4j 1 API) and the jars of pyspark's
    whose names start with one of `borrowed` (slf4j 2 and its log4j binding, Scala's library)."""
    from pyspark.find_spark_home import _find_spark_home

    spark_jars = Path(_find_spark_home()) / "jars"
    jars = [j for j in sorted(own.glob("*.jar")) if "slf4j-api-1." not in j.name]
    jars += [j for prefix in borrowed for j in sorted(spark_jars.glob(prefix + "*.jar"))]
    return ":".join(str(j) for j in jars)


def answers(port: int) -> bool:
    """Whether something listens on HOST:port."""
    with socket.socket() as s:
        s.settimeout(1)
        return s.connect_ex((HOST, port)) == 0


def running_pid(pid_file: Path, marker: bytes) -> int | None:
    """The pid the file records when that process is alive and its command line holds `marker`
    (not a recycled pid), else None."""
    try:
        pid = int(pid_file.read_text())
        os.kill(pid, 0)
    except (OSError, ValueError):
        return None
    cmdline = Path(f"/proc/{pid}/cmdline")
    return pid if cmdline.exists() and marker in cmdline.read_bytes() else None


def stop(pid_file: Path, marker: bytes, grace: float = 30) -> None:
    """Stops the recorded process (SIGTERM, then SIGKILL after `grace` seconds) and removes the file."""
    pid = running_pid(pid_file, marker)
    if pid is not None:
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + grace
        while running_pid(pid_file, marker) and time.monotonic() < deadline:
            time.sleep(0.3)
        if running_pid(pid_file, marker):
            os.kill(pid, signal.SIGKILL)
            time.sleep(0.5)
    pid_file.unlink(missing_ok=True)


def command_line(module: str, actions: dict[str, Callable[[], str]], argv: list[str] | None = None) -> int:
    """`python -m <module> <action>`: runs the action and prints what it returns (exit 0), or the
    usage (exit 2) or the failure (its exit code)."""
    args = sys.argv[1:] if argv is None else argv
    try:
        if len(args) != 1 or args[0] not in actions:
            raise UsageError(f"usage: python -m {module} {'|'.join(actions)}")
        print(actions[args[0]]())
    except RunnerError as exc:
        print(f"FAILED: {exc}", file=sys.stderr)
        return exc.exit_code
    return EXIT_OK
