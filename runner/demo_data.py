"""Demo landing data: a simulated history of the tracked tables, written in several batches,
customers as Parquet (binary LSNs), order lines as CSV (0x hex text), and the tables fed through
Change Event Streaming (employees) as CloudEvents JSON lines the way Event Hubs delivers them:
out of order within a batch, some delivered twice, large messages split into segments."""

from __future__ import annotations

import random
from pathlib import Path

from runner import ces_writer, landing_writer
from runner.project import tracked_tables
from runner.simulate import Simulator

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
    for i in range(batches):
        batch = txs[i * size:(i + 1) * size]
        landing_writer.write_batch(
            landing_dir, f"batch_{i + 1:04d}", captured, batch,
            DEMO_FORMATS, spark=spark, min_lsn=min_lsn if i == 0 else None,
        )
        for table in tables:
            if table.channel != "ces":
                continue
            events = ces_writer.table_events(table, batch, ces_writer.CesOptions(segment_size=400), seed=seed + i)
            events += rng.sample(events, k=len(events) // 20)  # at-least-once: some delivered twice
            rng.shuffle(events)  # Event Hubs partitions: out of LSN order
            ces_writer.write_lines(landing_dir / "ces" / f"{table.name}_hub" / f"batch_{i + 1:04d}.jsonl", events)
    return sim
