"""Demo landing data: a simulated history of the tracked tables, written in several batches,
customers as Parquet (binary LSNs) and order lines as CSV (0x hex text)."""

from __future__ import annotations

from pathlib import Path

from runner import landing_writer
from runner.project import tracked_tables
from runner.simulate import Simulator

DEMO_FORMATS = {"customers": "parquet", "order_lines": "csv"}


def generate(spark, project_dir: Path, landing_dir: Path, transactions: int, batches: int, seed: int) -> Simulator:
    tables = tracked_tables(project_dir)
    sim = Simulator(tables, seed=seed)
    txs = sim.run(transactions)
    min_lsn = {t.capture_instance: txs[0].begin_lsn for t in tables}
    landing_writer.write_captured_columns(landing_dir, tables)
    size = -(-len(txs) // batches)
    for i in range(batches):
        landing_writer.write_batch(
            landing_dir, f"batch_{i + 1:04d}", tables, txs[i * size:(i + 1) * size],
            DEMO_FORMATS, spark=spark, min_lsn=min_lsn if i == 0 else None,
        )
    return sim
