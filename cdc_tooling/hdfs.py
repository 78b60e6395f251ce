"""A local HDFS for the tests and for trying a remote landing folder: `python -m cdc_tooling.hdfs
up|down|status` (make hdfs-up / hdfs-down).

Apache Hadoop's mini-cluster (a NameNode and one DataNode in one JVM) at pyspark's Hadoop
release, from `hadoop-client-minicluster` fetched from Maven Central at set-up (runner/spark/jars.py,
`<jar folder>/hdfs`). The NameNode listens on 127.0.0.1 (SQLSERVER_CDC_HDFS_PORT, default 19820),
its web server with WebHDFS on SQLSERVER_CDC_HDFS_HTTP_PORT (default 19870), the DataNode on ports
of its own choosing, all on the loopback interface, so the landing folder is e.g.
`hdfs://127.0.0.1:19820/landing`, or the same folder as `webhdfs://127.0.0.1:19870/landing`
(which a target whose Spark runs elsewhere lists through fsspec: runner/sources/folders.py). Its blocks, log and pid file live
in one git-ignored folder (SQLSERVER_CDC_HDFS_DIR, default `<project>/.hdfs`); every `up` formats
it anew (the mini-cluster keeps nothing across restarts), `down` stops it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from cdc_tooling.daemons import HOST, LOG4J2, Service, answers, classpath, command_line, stop
from runner.errors import InfrastructureError
from runner.spark import jars
from runner.spark.session import check_java

PROJECT_DIR = Path(__file__).resolve().parent.parent
DEFAULT_PORT = 19820
DEFAULT_HTTP_PORT = 19870


@dataclass(frozen=True)
class Hdfs(Service):
    NAME, MARKER = "hdfs", b"MiniHadoopClusterManager"
    home: Path
    port: int
    http_port: int = DEFAULT_HTTP_PORT

    @classmethod
    def from_env(cls) -> Hdfs:
        return cls(Path(os.environ.get("SQLSERVER_CDC_HDFS_DIR", PROJECT_DIR / ".hdfs")),
                   int(os.environ.get("SQLSERVER_CDC_HDFS_PORT", DEFAULT_PORT)),
                   int(os.environ.get("SQLSERVER_CDC_HDFS_HTTP_PORT", DEFAULT_HTTP_PORT)))

    @property
    def uri(self) -> str:
        """The file system's root: hdfs://host:port."""
        return f"hdfs://{HOST}:{self.port}"

    @property
    def webhdfs_uri(self) -> str:
        """The same root through the NameNode's REST interface: webhdfs://host:http_port."""
        return f"webhdfs://{HOST}:{self.http_port}"


def _classpath() -> str:
    """The mini-cluster's jars plus slf4j 2 and log4j from pyspark's."""
    return classpath(jars.ensure_hdfs(), ("slf4j-api-2", "log4j-slf4j2-impl-", "log4j-api-", "log4j-core-"))


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
               "-D", f"hadoop.tmp.dir={hdfs.home / 'data'}", "-nnhttpport", str(hdfs.http_port),
               "-D", "dfs.permissions.enabled=false"]
    with (hdfs.home / "hdfs.out").open("ab") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    hdfs.pid_file.write_text(str(process.pid))
    deadline = time.monotonic() + timeout
    while not (details.exists() and details.stat().st_size and answers(hdfs.port) and answers(hdfs.http_port)):
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
    stop(hdfs.pid_file, hdfs.MARKER, grace)


def main(argv: list[str] | None = None) -> int:
    hdfs = Hdfs.from_env()

    def started() -> str:
        up(hdfs)
        return (f"HDFS up: {hdfs.uri}, WebHDFS {hdfs.webhdfs_uri} (e.g. python -m runner run --landing {hdfs.uri}/landing); "
                f"its data and log in {hdfs.home}")

    def stopped() -> str:
        down(hdfs)
        return "HDFS down (its data is gone with it: the next `up` starts empty)"

    def status() -> str:
        pid = hdfs.pid()
        return f"HDFS running (pid {pid}) at {hdfs.uri}" if pid else "HDFS not running"

    return command_line("cdc_tooling.hdfs", {"up": started, "down": stopped, "status": status}, argv)


if __name__ == "__main__":
    sys.exit(main())
