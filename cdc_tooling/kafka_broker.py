"""A local Apache Kafka broker for the tests and the Kafka demo: `python -m cdc_tooling.kafka_broker
up|down|status` (make kafka-up / kafka-down).

One node in KRaft mode (broker and controller in one JVM, no ZooKeeper), from Kafka's own jars
fetched from Maven Central at set-up (runner/spark/jars.py, `<jar folder>/kafka-broker`) with Scala's
library from pyspark. Every listener is bound to 127.0.0.1:
- PLAINTEXT (SQLSERVER_CDC_KAFKA_PORT, default 19092): no authentication, for the demo and for
  producing in the tests;
- SASL_PLAINTEXT with mechanism PLAIN (SQLSERVER_CDC_KAFKA_SASL_PORT, default 19093): user `cdc`
  with the password in SQLSERVER_CDC_KAFKA_PASSWORD at `up` (a random one when unset, printed),
  the listener the tests read through, so the secret-handling path is the real one;
- the controller (SQLSERVER_CDC_KAFKA_CONTROLLER_PORT, default 19094).
Topics are created on first use with three partitions. Data, configuration, log and pid file
live in one git-ignored folder (SQLSERVER_CDC_KAFKA_DIR, default `<project>/.kafka`); `down` stops
the broker and keeps the data, so `up` again is a broker restart.
"""

from __future__ import annotations

import base64
import os
import secrets
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from cdc_tooling.daemons import HOST, LOG4J2, Service, answers, classpath, command_line, stop
from runner.errors import InfrastructureError
from runner.spark import jars
from runner.spark.session import check_java

PROJECT_DIR = Path(__file__).resolve().parent.parent
PORTS = {
    "SQLSERVER_CDC_KAFKA_PORT": 19092,
    "SQLSERVER_CDC_KAFKA_SASL_PORT": 19093,
    "SQLSERVER_CDC_KAFKA_CONTROLLER_PORT": 19094,
}
USER = "cdc"


@dataclass(frozen=True)
class Broker(Service):
    NAME, MARKER = "broker", b"kafka.Kafka"
    home: Path
    plain_port: int
    sasl_port: int
    controller_port: int

    @classmethod
    def from_env(cls) -> Broker:
        home = Path(os.environ.get("SQLSERVER_CDC_KAFKA_DIR", PROJECT_DIR / ".kafka"))
        ports = [int(os.environ.get(name, default)) for name, default in PORTS.items()]
        return cls(home, *ports)

    @property
    def bootstrap(self) -> str:
        """The PLAINTEXT listener: host:port."""
        return f"{HOST}:{self.plain_port}"

    @property
    def sasl_bootstrap(self) -> str:
        return f"{HOST}:{self.sasl_port}"


def _classpath() -> str:
    """Kafka's jars plus Scala's library, slf4j 2 and its log4j binding from pyspark's."""
    return classpath(jars.ensure_broker(), ("scala-library-", "slf4j-api-2", "log4j-slf4j2-impl-"))


def _properties(broker: Broker, password: str) -> str:
    jaas = (f'org.apache.kafka.common.security.plain.PlainLoginModule required username="{USER}" '
            f'password="{password}" user_{USER}="{password}";')
    return "\n".join([
        "process.roles=broker,controller",
        "node.id=1",
        f"controller.quorum.voters=1@{HOST}:{broker.controller_port}",
        (f"listeners=PLAINTEXT://{HOST}:{broker.plain_port},SASL_PLAINTEXT://{HOST}:{broker.sasl_port},"
         f"CONTROLLER://{HOST}:{broker.controller_port}"),
        f"advertised.listeners=PLAINTEXT://{HOST}:{broker.plain_port},SASL_PLAINTEXT://{HOST}:{broker.sasl_port}",
        "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT,CONTROLLER:PLAINTEXT",
        "controller.listener.names=CONTROLLER",
        "inter.broker.listener.name=PLAINTEXT",
        "sasl.enabled.mechanisms=PLAIN",
        f"listener.name.sasl_plaintext.plain.sasl.jaas.config={jaas}",
        f"log.dirs={broker.home / 'data'}",
        "num.partitions=3",
        "auto.create.topics.enable=true",
        "offsets.topic.replication.factor=1",
        "transaction.state.log.replication.factor=1",
        "transaction.state.log.min.isr=1",
        "share.coordinator.state.topic.replication.factor=1",
        "share.coordinator.state.topic.min.isr=1",
        "group.initial.rebalance.delay.ms=0",
        "",
    ])


def up(broker: Broker, timeout: float = 120, quiet: bool = True) -> None:
    """Starts the broker (formatting its storage the first time) and waits for its listeners."""
    if broker.pid():
        return
    check_java()
    broker.home.mkdir(parents=True, exist_ok=True)
    config = broker.home / "server.properties"
    if not config.exists():
        password = os.environ.get("SQLSERVER_CDC_KAFKA_PASSWORD") or secrets.token_urlsafe(12)
        config.write_text(_properties(broker, password))
        config.chmod(0o600)
        if not os.environ.get("SQLSERVER_CDC_KAFKA_PASSWORD") and not quiet:
            print(f"user {USER}'s password on the SASL listener {broker.sasl_bootstrap}: {password}")
    (broker.home / "log4j2.properties").write_text(LOG4J2.format(log=broker.log))
    classpath = _classpath()
    java = ["java", "-Xms256m", "-Xmx768m", f"-Dlog4j2.configurationFile={broker.home / 'log4j2.properties'}",
            "-cp", classpath]
    if not (broker.home / "data" / "meta.properties").exists():
        cluster_id = _cluster_id()
        done = subprocess.run(java + ["kafka.tools.StorageTool", "format", "-t", cluster_id, "-c", str(config)],
                              capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise InfrastructureError(f"could not format the Kafka broker's storage: {(done.stderr or done.stdout)[-500:]}")
    with (broker.home / "broker.out").open("ab") as out:
        process = subprocess.Popen(java + ["kafka.Kafka", str(config)], stdout=out, stderr=subprocess.STDOUT,
                                   start_new_session=True)
    broker.pid_file.write_text(str(process.pid))
    deadline = time.monotonic() + timeout
    while not (answers(broker.plain_port) and answers(broker.sasl_port)):
        if process.poll() is not None:
            raise InfrastructureError(f"the Kafka broker exited with {process.returncode}; see {broker.log} and "
                                      f"{broker.home / 'broker.out'}")
        if time.monotonic() > deadline:
            down(broker)
            raise InfrastructureError(f"the Kafka broker did not listen on {broker.bootstrap} within {timeout:.0f} s")
        time.sleep(0.5)


def _cluster_id() -> str:
    """A random cluster id as Kafka makes one (a UUID, URL-safe base64 without padding), never one
    that starts with '-': the storage tool's argument parser would read it as an option (one id in
    64 did, failing the format with "argument --cluster-id/-t: expected one argument")."""
    while (cluster_id := base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()).startswith("-"):
        pass
    return cluster_id


def down(broker: Broker, grace: float = 30) -> None:
    """Stops the broker (SIGTERM, then SIGKILL after `grace` seconds); keeps its data."""
    stop(broker.pid_file, broker.MARKER, grace)


def main(argv: list[str] | None = None) -> int:
    broker = Broker.from_env()

    def started() -> str:
        up(broker, quiet=False)
        return (f"Kafka broker up: PLAINTEXT {broker.bootstrap}, SASL_PLAINTEXT (PLAIN, user {USER}) "
                f"{broker.sasl_bootstrap}; data and log in {broker.home}")

    def stopped() -> str:
        down(broker)
        return "Kafka broker down (its data is kept; `make kafka-up` restarts it)"

    def status() -> str:
        pid = broker.pid()
        return f"Kafka broker running (pid {pid}) on {broker.bootstrap}" if pid else "Kafka broker not running"

    return command_line("cdc_tooling.kafka_broker", {"up": started, "down": stopped, "status": status}, argv)


if __name__ == "__main__":
    sys.exit(main())
