"""Demo landing data: a simulated history of the tracked tables, written in several batches,
customers as Parquet (binary LSNs), order lines as CSV (0x hex text), each export with its
manifest, and the tables fed through
Change Event Streaming (employees) as CloudEvents JSON lines the way Event Hubs delivers them:
out of order within a batch, some delivered twice, large messages split into segments; and the
tables fed through Debezium (products) as a Kafka sink writes them: a snapshot of the first
transaction's rows, then change events with tombstones, schemas enabled, some events replayed
a batch later as after a connector restart. With a Kafka broker, the CES and Debezium events go
to topics instead (`python -m cdc_tooling demo --kafka HOST:PORT`)."""

from __future__ import annotations

import json
import random
from pathlib import Path

from cdc_simulator import ces_writer, debezium_writer, kafka_writer, landing_writer
from cdc_simulator.simulate import Simulator, replay
from cdc_simulator.tables import tracked_tables

DEMO_FORMATS = {"customers": "parquet", "order_lines": "csv"}


class DemoHistory:
    """A simulated history of the project's tracked tables, cut into batches; each batch written
    as landing files, or with `kafka` (bootstrap servers) its CES and Debezium events produced to
    Kafka topics instead (docs/channels.md "Reading from Kafka and Event Hubs"): CES events on topic
    `<table>_hub` spread over its partitions as Event Hubs spreads them, Debezium records keyed by
    the row's key on the connector's topic. The same seed gives the same events either way. `spark`
    (Spark's Kafka sink) is needed with `kafka` only: files are written without Spark."""

    def __init__(self, spark, project_dir: Path, transactions: int, batches: int, seed: int,
                 kafka: str | None = None):
        self.spark, self.seed, self.kafka = spark, seed, kafka
        self.tables = tracked_tables(project_dir)
        self.captured = [t for t in self.tables if t.channel == "change_tables"]
        self.sim = Simulator(self.tables, seed=seed)
        self.txs = self.sim.run(transactions)
        self.batches = batches
        self.size = -(-len(self.txs) // batches)
        self.rng = random.Random(seed)
        self.spread = random.Random(seed + 1)  # CES partitions (not drawn from rng: files and Kafka agree)
        self.renderers = {t.name: debezium_writer.Renderer(t, debezium_writer.DebeziumOptions(schema=True, kafka_record=kafka is not None))
                          for t in self.tables if t.channel == "debezium"}
        self.replayed: dict[str, list[str]] = {name: [] for name in self.renderers}
        self.exported = None

    def batch(self, i: int) -> list:
        return self.txs[i * self.size:(i + 1) * self.size]

    def write(self, i: int, landing_dir: Path) -> None:
        """Writes batch i (0-based): change-table exports to files, events to files or Kafka."""
        kafka = self.kafka
        batch = self.batch(i)
        name = f"batch_{i + 1:04d}"
        if self.captured:
            if i == 0:
                landing_writer.write_captured_columns(landing_dir, self.captured)
            # each capture instance's export comes with its manifest (docs/landing.md "Export manifests")
            landing_writer.write_batch(
                landing_dir, name, self.captured, batch, DEMO_FORMATS,
                min_lsn={t.capture_instance: self.txs[0].begin_lsn for t in self.captured} if i == 0 else None,
                manifest=(self.exported, batch[-1].commit_lsn))
            self.exported = batch[-1].commit_lsn
        records = []
        for table in self.tables:
            if table.channel != "ces":
                continue
            events = ces_writer.table_events(table, batch, ces_writer.CesOptions(segment_size=400), seed=self.seed + i)
            events += self.rng.sample(events, k=len(events) // 20)  # at-least-once: some delivered twice
            self.rng.shuffle(events)  # Event Hubs partitions: out of LSN order
            if kafka is None:
                ces_writer.write_lines(landing_dir / "ces" / f"{table.name}_hub" / f"{name}.jsonl", events)
            else:
                records += [{"topic": f"{table.name}_hub", "partition": self.spread.randrange(3),
                             "value": json.dumps(e, ensure_ascii=False)} for e in events]
        for table_name, renderer in self.renderers.items():
            lines = self.replayed[table_name]
            if i == 0:  # the connector's initial snapshot: the first transaction's rows
                state = replay(self.tables, batch[:1])[table_name]
                lines += renderer.snapshot(list(state.values()), batch[0].commit_lsn, batch[0].end_time)
                lines += renderer.changes(batch[1:])
            else:
                lines += renderer.changes(batch)
            # a connector restart replays the last events of a batch in the next one
            self.replayed[table_name] = lines[-len(lines) // 20:]
            if kafka is None:
                debezium_writer.write_lines(landing_dir / "debezium" / renderer.topic / f"{name}.jsonl", lines)
            else:
                for line in lines:
                    record = json.loads(line)
                    records.append({"topic": record["topic"], "key": json.dumps(record["key"]),
                                    "value": None if record["value"] is None else json.dumps(record["value"])})
        if kafka is not None and records:
            kafka_writer.produce(self.spark, kafka, records)


def kafka_sources(bootstrap: str, project_dir: Path) -> list:
    """The demo's Kafka sources on a broker without authentication (`make kafka-up`'s PLAINTEXT
    listener): one for the CES tables' topics, one for the Debezium connector's."""
    from runner.sources import kafka

    tables = tracked_tables(project_dir)
    declared = {}
    ces = [f"{t.name}_hub" for t in tables if t.channel == "ces"]
    if ces:
        declared["demo_ces"] = {"channel": "ces", "bootstrap_servers": bootstrap, "topics": ces}
    debezium = [debezium_writer.Renderer(t).topic for t in tables if t.channel == "debezium"]
    if debezium:
        declared["demo_debezium"] = {"channel": "debezium", "bootstrap_servers": bootstrap, "topics": debezium}
    return kafka.parse_sources(declared)


def generate(spark, project_dir: Path, landing_dir: Path, transactions: int, batches: int, seed: int,
             kafka: str | None = None) -> Simulator:
    history = DemoHistory(spark, project_dir, transactions, batches, seed, kafka)
    for i in range(batches):
        history.write(i, landing_dir)
    return history.sim
