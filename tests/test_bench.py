"""The benchmark's workload is real-shaped: valid operation sequences per key, before-images equal
to the previous after-image, update masks covering exactly the changed columns, every commit
mapped, and an incremental batch that continues the history. (The benchmark itself is run by
`make bench`, never by the tests: timings are not asserted.)"""

from __future__ import annotations

import pytest

from runner.bench import BenchConfig, declarations, specs, write_workload
from runner.errors import UsageError


def _rows(spark, landing, spec):
    path = landing / "change_tables" / spec.capture_instance
    rows = [{k: bytes(v) if isinstance(v, bytearray) else v for k, v in r.asDict().items()}
            for r in spark.read.parquet(*[str(p) for p in path.iterdir()]).collect()]
    return sorted(rows, key=lambda r: (r["__$start_lsn"], r["__$seqval"], r["__$operation"]))


def test_workload_is_a_valid_cdc_history(spark, tmp_path):
    cfg = BenchConfig(changes=1_200, keys=80, tables=2, columns=5, width=12)
    tables = declarations(cfg)
    changes, keys = cfg.per_table(cfg.changes), cfg.keys // cfg.tables
    written = write_workload(spark, tmp_path, tables, 0, changes, keys, cfg, "initial")
    written += write_workload(spark, tmp_path, tables, changes, changes + 60, keys, cfg, "batch")
    mapped = {bytes(r["start_lsn"]) for r in spark.read.parquet(str(tmp_path / "cdc_metadata/lsn_time_mapping/*")).collect()}
    total = 0
    for spec in specs(tables):
        non_key = [c for c in spec.columns if c.name != "id"]
        state: dict[int, dict] = {}
        ops = {1: 0, 2: 0, 3: 0, 4: 0}
        rows = _rows(spark, tmp_path, spec)
        total += len(rows)
        assert len({(r["__$seqval"], r["__$operation"]) for r in rows}) == len(rows)
        before = None
        for r in rows:
            assert bytes(r["__$start_lsn"]) in mapped
            key, op = r["id"], r["__$operation"]
            values = {c.name: r[c.name] for c in non_key}
            ops[op] += 1
            if op == 2:
                assert key not in state, f"insert of existing key {key}"
                state[key] = values
            elif op == 1:
                assert state.pop(key) == values, f"delete image of {key} is not its state"
            elif op == 3:
                assert state[key] == values, f"update-before image of {key} is not its state"
                before = values
            else:
                mask = int.from_bytes(r["__$update_mask"], "big")
                in_mask = {c.name for c in non_key if mask >> (c.ordinal - 1) & 1}
                changed = {c for c in values if values[c] != before[c]}
                assert changed <= in_mask and 1 <= len(in_mask) <= 2
                state[key] = values
        assert len(state) <= keys and all(ops.values()), ops  # every operation occurs
        assert ops[3] == ops[4]
    assert written == total


@pytest.mark.parametrize("options, message", [
    ({"changes": 10, "keys": 100}, "must be at least --keys"),
    ({"tables": 0}, "--tables must be 1..20"),
    ({"tables": 11, "rows_per_transaction": 6}, "at most 62"),
    ({"columns": 61}, "--columns must be 1..60"),
    ({"batch_fraction": 1.5}, "--batch-fraction must be in"),
    ({"state_factor": 1}, "--state-factor at least 2"),
])
def test_bench_sizes_are_checked(options, message):
    with pytest.raises(UsageError, match=message):
        BenchConfig(**options).validate()
