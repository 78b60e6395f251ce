"""A local Spark standalone cluster to run the project's `cluster` and `connect` targets against:
`python -m cdc_tooling.cluster up|down|status` (make cluster-up / cluster-down).

From the pip-installed pyspark: one master, two workers (1 core, 1 GiB each) and a server: one
Spark application on that master, the Spark Thrift server, which also serves Spark Connect (its
plugin), so both targets reach the same warm driver, whose 2 GiB open the Hive metastore on
Derby; or none (`up none`: the runner itself is the application). Every port and web UI is bound
to 127.0.0.1 (Spark binds its UIs to all interfaces unless SPARK_LOCAL_IP says otherwise).
Metastore, warehouse, worker folders, logs and pid files live in one git-ignored folder
(SQLSERVER_CDC_CLUSTER_DIR, default `<project>/.cluster`). Ports come from environment variables
(see PORTS); `up` waits until the server's ports answer.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from runner.errors import EXIT_OK, InfrastructureError, RunnerError, UsageError
from runner.spark import jars
from runner.spark.session import check_java

PROJECT_DIR = Path(__file__).resolve().parent.parent
HOST = "127.0.0.1"
# environment variable -> default; chosen away from Spark's and Hive's defaults (7077, 8080,
# 10000) so a cluster already running on this machine is not disturbed
PORTS = {
    "SQLSERVER_CDC_THRIFT_PORT": 17010,
    "SQLSERVER_CDC_CONNECT_PORT": 17015,
    "SQLSERVER_CDC_MASTER_PORT": 17077,
    "SQLSERVER_CDC_MASTER_UI_PORT": 17080,
    "SQLSERVER_CDC_WORKER1_PORT": 17078,
    "SQLSERVER_CDC_WORKER1_UI_PORT": 17081,
    "SQLSERVER_CDC_WORKER2_PORT": 17079,
    "SQLSERVER_CDC_WORKER2_UI_PORT": 17082,
}
# The Spark settings the marts rely on, as the local target has them (dbt-spark adds ANSI off):
# the Thrift server's defaults for every session. Delta's extension and catalog make every
# table Delta-capable; its jars (spark.jars, set in _commands) reach the executors from the driver.
SQL_CONF = {
    "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
    "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
    "spark.databricks.delta.snapshotPartitions": "2",
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.ansi.enabled": "false",
    "spark.sql.shuffle.partitions": "4",
    "spark.sql.constraintPropagation.enabled": "false",
    # as in profiles.yml: keep the compiled classes of the statements the server runs again
    "spark.sql.codegen.cache.maxEntries": "1500",
    # as in profiles.yml: Spark's 16 subquery threads deadlock a query whose subqueries hold
    # subqueries below shuffles; 128 is Spark's most
    "spark.sql.subquery.maxThreadThreshold": "128",
}
# as in profiles.yml: the JVM interprets methods over 8,000 bytes of bytecode unless told to compile
# them, and Spark's generated code for the staging and mart plans is such a method
JIT_HUGE_METHODS = "-XX:-DontCompileHugeMethods"
# Spark logs warnings and errors only (at INFO the Thrift server writes lines per statement)
LOG4J2 = """rootLogger.level = warn
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{yyyy-MM-dd HH:mm:ss} %p %c{1}: %m%n
"""
SERVER_DRIVER_MEMORY = "2g"
MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"
THRIFT_CLASS = "org.apache.spark.sql.hive.thriftserver.HiveThriftServer2"
# Spark Connect's service as a plugin of the Thrift server's application (pyspark ships its jar)
CONNECT_PLUGIN = "org.apache.spark.sql.connect.SparkConnectPlugin"
# start order; stopped in reverse. The server holds every core of the workers while it runs.
BASE = ("master", "worker1", "worker2")
ROLES = (*BASE, "server")
CLASSES = {"master": MASTER_CLASS, "worker1": WORKER_CLASS, "worker2": WORKER_CLASS, "server": THRIFT_CLASS}


@dataclass(frozen=True)
class Cluster:
    state_dir: Path
    ports: dict[str, int]

    @classmethod
    def from_env(cls) -> Cluster:
        state = Path(os.environ.get("SQLSERVER_CDC_CLUSTER_DIR", PROJECT_DIR / ".cluster")).resolve()
        ports = {}
        for name, default in PORTS.items():
            value = os.environ.get(name, str(default))
            if not value.isdigit() or not 0 < int(value) < 65536:
                raise UsageError(f"{name} must be a TCP port number; got '{value}'")
            ports[name] = int(value)
        return cls(state, ports)

    @property
    def thrift_port(self) -> int:
        return self.ports["SQLSERVER_CDC_THRIFT_PORT"]

    @property
    def connect_url(self) -> str:
        return f"sc://{HOST}:{self.ports['SQLSERVER_CDC_CONNECT_PORT']}"

    @property
    def connect_port(self) -> int:
        return self.ports["SQLSERVER_CDC_CONNECT_PORT"]

    @property
    def master_url(self) -> str:
        return f"spark://{HOST}:{self.ports['SQLSERVER_CDC_MASTER_PORT']}"

    def log(self, role: str) -> Path:
        return self.state_dir / "logs" / f"{role}.log"

    def pid_file(self, role: str) -> Path:
        return self.state_dir / "pids" / f"{role}.pid"

    def pids(self) -> dict[str, int]:
        """The recorded pids of the roles that were started (running or not)."""
        return {role: int(self.pid_file(role).read_text()) for role in ROLES if self.pid_file(role).exists()}

    def running(self) -> dict[str, int]:
        return {role: pid for role, pid in self.pids().items() if _is_ours(pid, CLASSES[role])}


def _spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).resolve().parent


def _is_ours(pid: int, java_class: str) -> bool:
    """The pid is alive and still runs the class we started (not a recycled pid)."""
    try:
        return java_class in Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
    except OSError:
        return False


def _env(cluster: Cluster, role: str) -> dict[str, str]:
    return {
        **os.environ,
        "SPARK_HOME": str(_spark_home()),
        "SPARK_LOCAL_IP": HOST,  # web UIs, block managers and executors bind here, not 0.0.0.0
        "SPARK_LOCAL_HOSTNAME": HOST,
        "SPARK_CONF_DIR": str(cluster.state_dir / "conf"),  # no user spark-defaults leak in
        # the daemons' heap; Spark's launcher also gives it to the Thrift server, over --driver-memory
        "SPARK_DAEMON_MEMORY": SERVER_DRIVER_MEMORY if role == "server" else "512m",
        "SPARK_LOG_DIR": str(cluster.state_dir / "logs"),
    }


def _commands(cluster: Cluster) -> dict[str, list[str]]:
    home = _spark_home()
    p = cluster.ports
    workers = {}
    for n in (1, 2):
        workers[f"worker{n}"] = [
            str(home / "bin/spark-class"), WORKER_CLASS, "--host", HOST,
            "--port", str(p[f"SQLSERVER_CDC_WORKER{n}_PORT"]), "--webui-port", str(p[f"SQLSERVER_CDC_WORKER{n}_UI_PORT"]),
            "--cores", "1", "--memory", "1g", "--work-dir", str(cluster.state_dir / f"work/worker{n}"),
            cluster.master_url,
        ]
    conf = {
        "spark.driver.host": HOST,
        "spark.driver.bindAddress": HOST,
        "spark.ui.enabled": "false",
        # Spark keeps recent statements' plans and jobs for the UI even when the UI is off;
        # dbt's marts are large plans: keep few in the driver's heap.
        "spark.sql.ui.retainedExecutions": "10",
        "spark.sql.thriftServer.ui.retainedStatements": "10",
        "spark.sql.thriftServer.ui.retainedSessions": "10",
        "spark.ui.retainedJobs": "50",
        "spark.ui.retainedStages": "50",
        "spark.ui.retainedTasks": "1000",
        "spark.executor.memory": "768m",
        "spark.executor.cores": "1",
        "spark.cores.max": "2",
        "spark.sql.warehouse.dir": str(cluster.state_dir / "warehouse"),
        "spark.hadoop.javax.jdo.option.ConnectionURL":
            f"jdbc:derby:;databaseName={cluster.state_dir / 'metastore_db'};create=true",
        "spark.driver.extraJavaOptions": f"-Dderby.stream.error.file={cluster.state_dir / 'logs/derby.log'} {JIT_HUGE_METHODS}",
        # the executors run the generated code of the staging and mart plans (see JIT_HUGE_METHODS)
        "spark.executor.extraJavaOptions": JIT_HUGE_METHODS,
        # as in profiles.yml: let Delta replace a replaced table's schema in the embedded metastore
        "spark.hadoop.hive.metastore.disallow.incompatible.col.type.changes": "false",
        "spark.jars": jars.jar_list(),  # Delta Lake's, from the project's jar folder, for the executors
        # ... and Delta's own on the Thrift server's classpath: its statement threads resolve
        # classes through a loader that does not see spark.jars (ClassNotFoundException
        # org.apache.spark.sql.delta.stats.DataFiltersBuilder otherwise)
        "spark.driver.extraClassPath": jars.jar_list(only="io.delta_", separator=":"),
        **SQL_CONF,
    }
    server = {
        **conf,
        "spark.plugins": CONNECT_PLUGIN,
        "spark.connect.grpc.binding.address": HOST,
        "spark.connect.grpc.binding.port": str(cluster.connect_port),
    }
    server_command = [
        str(home / "bin/spark-submit"), "--master", cluster.master_url, "--class", THRIFT_CLASS,
        "--name", "sqlserver_cdc server (Thrift and Spark Connect)", "--driver-memory", SERVER_DRIVER_MEMORY,
        *[arg for key, value in server.items() for arg in ("--conf", f"{key}={value}")],
        "spark-internal",
        "--hiveconf", f"hive.server2.thrift.bind.host={HOST}",
        "--hiveconf", f"hive.server2.thrift.port={cluster.thrift_port}",
    ]
    return {
        "master": [
            str(home / "bin/spark-class"), MASTER_CLASS, "--host", HOST,
            "--port", str(p["SQLSERVER_CDC_MASTER_PORT"]), "--webui-port", str(p["SQLSERVER_CDC_MASTER_UI_PORT"]),
        ],
        **workers,
        "server": server_command,
    }


def _answers(port: int) -> bool:
    try:
        with socket.create_connection((HOST, port), timeout=2):
            return True
    except OSError:
        return False


def _wait_for_port(cluster: Cluster, role: str, alive: Callable[[], bool], port: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if _answers(port):
            return
        if not alive():
            raise InfrastructureError(f"the {role} process exited during start-up; see {cluster.log(role)}")
        time.sleep(1)
    raise InfrastructureError(f"the {role} did not answer on {HOST}:{port} within {timeout:.0f}s; see {cluster.log(role)}")


def _alive(process: subprocess.Popen) -> Callable[[], bool]:
    return lambda: process.poll() is None


def up(cluster: Cluster, timeout: float = 240, server: bool = True) -> None:
    """Starts master, workers and the server (server=False: master and workers only, for the runner
    as an application of its own, which a server would leave no cores to); returns when the
    server's Thrift and Connect ports (the workers') answer. Reuses what is up: starts the server
    on running master and workers; refuses to start over a partly running cluster."""
    roles = ROLES if server else BASE
    ports = (cluster.thrift_port, cluster.connect_port) if server else ()
    running = cluster.running()
    if set(running) == set(roles) and all(_answers(port) for port in ports):
        print(f"cluster already up (state {cluster.state_dir}{', server' if server else ''})")
        return
    if running and (set(running) - set(roles) or not set(BASE) <= set(running)):
        raise InfrastructureError(
            f"part of the cluster or another server is running ({', '.join(running)}): run `make cluster-down` first")
    for role in [r for r in roles if r not in running]:
        names = (["SQLSERVER_CDC_THRIFT_PORT", "SQLSERVER_CDC_CONNECT_PORT"] if role == "server"
                 else [f"SQLSERVER_CDC_{role.upper()}_PORT", f"SQLSERVER_CDC_{role.upper()}_UI_PORT"])
        for name in [n for n in names if n in cluster.ports]:
            if _answers(cluster.ports[name]):
                raise InfrastructureError(f"port {cluster.ports[name]} ({name}) is already in use: set {name} to a free port")
    check_java()
    for folder in ("logs", "pids", "conf", "work"):
        (cluster.state_dir / folder).mkdir(parents=True, exist_ok=True)
    for stale in (cluster.state_dir / "pids").glob("*.pid"):
        if stale.stem not in running:
            stale.unlink()
    (cluster.state_dir / "conf/log4j2.properties").write_text(LOG4J2)
    commands = _commands(cluster)
    processes = {}
    try:
        for role in [r for r in roles if r not in running]:
            with cluster.log(role).open("ab") as log:
                processes[role] = subprocess.Popen(commands[role], cwd=cluster.state_dir, env=_env(cluster, role), stdout=log,
                                                   stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                                   start_new_session=True)
            cluster.pid_file(role).write_text(f"{processes[role].pid}\n")
            if role == "master":
                _wait_for_port(cluster, role, _alive(processes[role]), cluster.ports["SQLSERVER_CDC_MASTER_PORT"], 60)
        for port in ports:
            alive = (_alive(processes["server"]) if "server" in processes
                     else lambda: _is_ours(running["server"], CLASSES["server"]))
            _wait_for_port(cluster, "server", alive, port, timeout)
        for n in [n for n in (1, 2) if f"worker{n}" in processes]:
            _wait_for_port(cluster, f"worker{n}", _alive(processes[f"worker{n}"]),
                           cluster.ports[f"SQLSERVER_CDC_WORKER{n}_PORT"], 60)
    except BaseException:
        down(cluster)
        raise
    served = f"Thrift server {HOST}:{cluster.thrift_port} and Spark Connect {cluster.connect_url}" if server else "no server"
    print(f"cluster up: master {cluster.master_url}, {served}, state and logs in {cluster.state_dir}")


def down(cluster: Cluster, grace: float = 30, roles: tuple[str, ...] = ROLES) -> None:
    """Stops the recorded processes of `roles` (default all; the server first), TERM then KILL
    after `grace` seconds, and removes their pid files."""
    for role in reversed([r for r in ROLES if r in roles]):
        pid_file = cluster.pid_file(role)
        if not pid_file.exists():
            continue
        pid = int(pid_file.read_text())
        if _is_ours(pid, CLASSES[role]):
            os.kill(pid, signal.SIGTERM)
            deadline = time.monotonic() + grace
            while _is_ours(pid, CLASSES[role]) and time.monotonic() < deadline:
                time.sleep(0.5)
            if _is_ours(pid, CLASSES[role]):
                os.kill(pid, signal.SIGKILL)
                while _is_ours(pid, CLASSES[role]):
                    time.sleep(0.2)
        pid_file.unlink()


def process_tree(pids: list[int]) -> set[int]:
    """The pids and all their descendants (a worker's executors)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    tree, todo = set(), list(pids)
    while todo:
        pid = todo.pop()
        if pid not in tree:
            tree.add(pid)
            todo += children.get(pid, [])
    return tree


def listening(pids: set[int]) -> list[str]:
    """Local addresses (host:port) on which any of the pids listens (from `ss -ltnpH`)."""
    out = subprocess.run(["ss", "-ltnpH"], capture_output=True, text=True, check=True).stdout
    found = []
    for line in out.splitlines():
        owners = {int(p) for p in re.findall(r"pid=(\d+)", line)}
        if owners & pids:
            found.append(line.split()[3])
    return found


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args[:1] not in (["up"], ["down"], ["status"]) or len(args) > (2 if args[0] == "up" else 1) \
            or args[1:] not in ([], ["server"], ["none"]):
        print("usage: python -m cdc_tooling.cluster up [server|none]|down|status", file=sys.stderr)
        return 2
    try:
        cluster = Cluster.from_env()
        if args[0] == "up":
            up(cluster, server=args[1:] != ["none"])
        elif args[0] == "down":
            down(cluster)
            print(f"cluster down (state kept in {cluster.state_dir})")
        else:
            running = cluster.running()
            print(", ".join(f"{role} pid {pid}" for role, pid in running.items()) or "cluster not running")
            for address in listening(process_tree(list(running.values()))):
                print(f"listening on {address}")
        return EXIT_OK
    except RunnerError as exc:
        print(f"FAILED: {exc}", file=sys.stderr)
        return exc.exit_code


if __name__ == "__main__":
    sys.exit(main())
