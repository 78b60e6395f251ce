"""A local HDFS for the tests and for trying a remote landing folder: `python -m cdc_tooling.hdfs
up|down|status` (make hdfs-up / hdfs-down).

Apache Hadoop's mini-cluster (a NameNode and one DataNode in one JVM) at pyspark's Hadoop
release, from `hadoop-client-minicluster` fetched from Maven Central at set-up (runner/jars.py,
`<jar folder>/hdfs`). The NameNode listens on 127.0.0.1 (SQLSERVER_CDC_HDFS_PORT, default 19820;
its web UI and the DataNode on ports of their own choosing, on the loopback interface too), so
the landing folder is e.g. `hdfs://127.0.0.1:19820/landing`. Its blocks, log and pid file live
in one git-ignored folder (SQLSERVER_CDC_HDFS_DIR, default `<project>/.hdfs`); every `up` formats
it anew (the mini-cluster keeps nothing across restarts), `down` stops it.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from runner import jars
from runner.errors import EXIT_OK, InfrastructureError, RunnerError, UsageError
from runner.session import check_java

PROJECT_DIR = Path(__file__).resolve().parent.parent
HOST = "127.0.0.1"
DEFAULT_PORT = 19820
LOG4J2 = """rootLogger.level = warn
rootLogger.appenderRef.file.ref = file
appender.file.type = File
appender.file.name = file
appender.file.fileName = {log}
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = %d{{yyyy-MM-dd HH:mm:ss}} %p %c{{1}}: %m%n
"""


@dataclass(frozen=True)
class Hdfs:
    home: Path
    port: int

    @classmethod
    def from_env(cls) -> Hdfs:
        return cls(Path(os.environ.get("SQLSERVER_CDC_HDFS_DIR", PROJECT_DIR / ".hdfs")),
                   int(os.environ.get("SQLSERVER_CDC_HDFS_PORT", DEFAULT_PORT)))

    @property
    def uri(self) -> str:
        """The file system's root: hdfs://host:port."""
        return f"hdfs://{HOST}:{self.port}"

    @property
    def pid_file(self) -> Path:
        return self.home / "hdfs.pid"

    @property
    def log(self) -> Path:
        return self.home / "hdfs.log"

    def pid(self) -> int | None:
        """The running mini-cluster's process id, or None."""
        try:
            pid = int(self.pid_file.read_text())
            os.kill(pid, 0)
        except (OSError, ValueError):
            return None
        cmdline = Path(f"/proc/{pid}/cmdline")
        return pid if cmdline.exists() and b"MiniHadoopClusterManager" in cmdline.read_bytes() else None


def _classpath() -> str:
    """The mini-cluster's jars (without their old slf4j API) plus slf4j 2 and its log4j binding
    from pyspark's jars."""
    from pyspark.find_spark_home import _find_spark_home

    own = [j for j in sorted(jars.ensure_hdfs().glob("*.jar")) if "slf4j-api-1." not in j.name]
    spark_jars = Path(_find_spark_home()) / "jars"
    borrowed = [j for prefix in ("slf4j-api-2", "log4j-slf4j2-impl-", "log4j-api-", "log4j-core-")
                for j in sorted(spark_jars.glob(prefix + "*.jar"))]
    return ":".join(str(j) for j in own + borrowed)


def _answers(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(1)
        return s.connect_ex((HOST, port)) == 0


def up(hdfs: Hdfs, timeout: float = 120) -> None:
    """Starts the mini-cluster on a freshly formatted folder and waits until it serves."""
    if hdfs.pid():
        return
    check_java()
    shutil.rmtree(hdfs.home / "data", ignore_errors=True)
    hdfs.home.mkdir(parents=True, exist_ok=True)
    details = hdfs.home / "details.json"
    details.unlink(missing_ok=True)
    (hdfs.home / "log4j2.properties").write_text(LOG4J2.format(log=hdfs.log))
    command = ["java", "-Xms128m", "-Xmx512m", f"-Dlog4j2.configurationFile={hdfs.home / 'log4j2.properties'}",
               "-cp", _classpath(), "org.apache.hadoop.mapreduce.MiniHadoopClusterManager",
               "-nomr", "-format", "-nnport", str(hdfs.port), "-writeDetails", str(details),
               "-D", f"hadoop.tmp.dir={hdfs.home / 'data'}", "-D", f"dfs.namenode.http-address={HOST}:0",
               "-D", "dfs.permissions.enabled=false"]
    with (hdfs.home / "hdfs.out").open("ab") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    hdfs.pid_file.write_text(str(process.pid))
    deadline = time.monotonic() + timeout
    while not (details.exists() and details.stat().st_size and _answers(hdfs.port)):
        if process.poll() is not None:
            raise InfrastructureError(f"the HDFS mini-cluster exited with {process.returncode}; see "
                                      f"{hdfs.home / 'hdfs.out'} and {hdfs.log}")
        if time.monotonic() > deadline:
            down(hdfs)
            raise InfrastructureError(f"the HDFS mini-cluster did not serve {hdfs.uri} within {timeout:.0f} s")
        time.sleep(0.5)
    if json.loads(details.read_text()).get("namenode_port") != hdfs.port:
        down(hdfs)
        raise InfrastructureError(f"the HDFS mini-cluster did not take port {hdfs.port}; see {hdfs.home / 'hdfs.out'}")


def down(hdfs: Hdfs, grace: float = 30) -> None:
    """Stops the mini-cluster (SIGTERM, then SIGKILL after `grace` seconds)."""
    pid = hdfs.pid()
    if pid is None:
        hdfs.pid_file.unlink(missing_ok=True)
        return
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while hdfs.pid() and time.monotonic() < deadline:
        time.sleep(0.3)
    if hdfs.pid():
        os.kill(pid, signal.SIGKILL)
        time.sleep(0.5)
    hdfs.pid_file.unlink(missing_ok=True)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    hdfs = Hdfs.from_env()
    try:
        if args == ["up"]:
            up(hdfs)
            print(f"HDFS up: {hdfs.uri} (e.g. python -m runner run --landing {hdfs.uri}/landing); "
                  f"its data and log in {hdfs.home}")
        elif args == ["down"]:
            down(hdfs)
            print("HDFS down (its data is gone with it: the next `up` starts empty)")
        elif args == ["status"]:
            pid = hdfs.pid()
            print(f"HDFS running (pid {pid}) at {hdfs.uri}" if pid else "HDFS not running")
        else:
            raise UsageError("usage: python -m cdc_tooling.hdfs up|down|status")
    except RunnerError as exc:
        print(f"FAILED: {exc}", file=sys.stderr)
        return exc.exit_code
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
