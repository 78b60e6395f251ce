"""Demo landing data: a simulated history of the tracked tables, written in several batches,
customers as Parquet (binary LSNs), order lines as CSV (0x hex text), each export with its
manifest, and the tables fed through
Change Event Streaming (employees) as CloudEvents JSON lines the way Event Hubs delivers them:
out of order within a batch, some delivered twice, large messages split into segments; and the
tables fed through Debezium (products) as a Kafka sink writes them: a snapshot of the first
transaction's rows, then change events with tombstones, schemas enabled, some events replayed
a batch later as after a connector restart."""

from __future__ import annotations

import random
from pathlib import Path

from runner import ces_writer, debezium_writer, landing_writer
from runner.project import tracked_tables
from runner.simulate import Simulator, replay

DEMO_FORMATS = {"customers": "parquet", "order_lines": "csv"}


def generate(spark, project_dir: Path, landing_dir: Path, transactions: int, batches: int, seed: int) -> Simulator:
    tables = tracked_tables(project_dir)
    captured = [t for t in tables if t.channel == "change_tables"]
    sim = Simulator(tables, seed=seed)
    txs = sim.run(transactions)
    min_lsn = {t.capture_instance: txs[0].begin_lsn for t in captured}
    landing_writer.write_captured_columns(landing_dir, captured)
    size = -(-len(txs) // batches)
    rng = random.Random(seed)
    renderers = {t.name: debezium_writer.Renderer(t, debezium_writer.DebeziumOptions(schema=True))
                 for t in tables if t.channel == "debezium"}
    replayed: dict[str, list[str]] = {name: [] for name in renderers}
    exported = None
    for i in range(batches):
        batch = txs[i * size:(i + 1) * size]
        # each capture instance's export comes with its manifest (README "Export manifests")
        landing_writer.write_batch(
            landing_dir, f"batch_{i + 1:04d}", captured, batch,
            DEMO_FORMATS, spark=spark, min_lsn=min_lsn if i == 0 else None, manifest=(exported, batch[-1].commit_lsn),
        )
        exported = batch[-1].commit_lsn
        for table in tables:
            if table.channel != "ces":
                continue
            events = ces_writer.table_events(table, batch, ces_writer.CesOptions(segment_size=400), seed=seed + i)
            events += rng.sample(events, k=len(events) // 20)  # at-least-once: some delivered twice
            rng.shuffle(events)  # Event Hubs partitions: out of LSN order
            ces_writer.write_lines(landing_dir / "ces" / f"{table.name}_hub" / f"batch_{i + 1:04d}.jsonl", events)
        for name, renderer in renderers.items():
            lines = replayed[name]
            if i == 0:  # the connector's initial snapshot: the first transaction's rows
                state = replay(tables, batch[:1])[name]
                lines += renderer.snapshot(list(state.values()), batch[0].commit_lsn, batch[0].end_time)
                lines += renderer.changes(batch[1:])
            else:
                lines += renderer.changes(batch)
            # a connector restart replays the last events of a batch in the next one
            replayed[name] = lines[-len(lines) // 20:]
            debezium_writer.write_lines(landing_dir / "debezium" / renderer.topic / f"batch_{i + 1:04d}.jsonl", lines)
    return sim
