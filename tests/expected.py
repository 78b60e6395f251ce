"""Expected marts computed in plain Python from a simulated history: an independent statement
of what the current-state and history marts must contain."""

from __future__ import annotations

import sys

from cdc_simulator.simulate import TableSpec, Transaction, lsn_hex
from tests.scenarios import CHANGE_TABLES


def _key(spec: TableSpec, values: dict) -> tuple:
    return tuple(values[k] for k in spec.key)


def transaction_versions(spec: TableSpec, transactions: list[Transaction], upper: int | None = None):
    """Per key, the committed versions: (commit_lsn, end_time, net op name, values, changed
    ordinals). The changed ordinals are those set in the OR of the transaction's masks."""
    versions: dict[tuple, list[tuple]] = {}
    for tx in transactions:
        if upper is not None and tx.commit_lsn > upper:
            break
        by_key: dict[tuple, list] = {}
        for r in tx.changes.get(spec.name, []):
            if r.operation != 3:
                by_key.setdefault(_key(spec, r.values), []).append(r)
        for key, rows in by_key.items():
            rows.sort(key=lambda r: r.seqval)
            first, last = rows[0].operation, rows[-1].operation
            if first == 2 and last == 1:
                continue
            if len(rows) == 1:
                op = last
            elif first == 2:
                op = 2
            elif last == 1:
                op = 1
            else:
                op = 4
            name = {1: "delete", 2: "insert", 4: "update"}[op]
            mask = 0
            for r in rows:
                mask |= int.from_bytes(r.update_mask, "big")
            ordinals = {c.ordinal for c in spec.columns if mask >> (c.ordinal - 1) & 1}
            versions.setdefault(key, []).append((lsn_hex(tx.commit_lsn), tx.end_time, name, rows[-1].values, ordinals))
    return versions


def current_state(spec: TableSpec, transactions: list[Transaction], upper: int | None = None,
                  soft_deletes: bool = False) -> dict[tuple, dict]:
    """Per key, the current-state row; a deleted key is gone or, with soft_deletes, kept with the
    values its delete carried."""
    state = {}
    for key, versions in transaction_versions(spec, transactions, upper).items():
        lsn, _, op, values, _ = versions[-1]
        if op != "delete" or soft_deletes:
            state[key] = {**{c.name: values[c.name] for c in spec.columns}, "commit_lsn": lsn, "operation": op,
                          "is_deleted": op == "delete"}
    return state


def history(spec: TableSpec, transactions: list[Transaction], upper: int | None = None,
            history_columns: list[str] | None = None) -> dict[tuple, dict]:
    """(key..., valid_from_lsn) -> expected history row. With history_columns, an update whose
    mask touches none of them opens no version: its values replace the open version's."""
    tracked = None if history_columns is None else {c.ordinal for c in spec.columns if c.name in history_columns}
    rows = {}
    for key, versions in transaction_versions(spec, transactions, upper).items():
        kept: list[list] = []  # [lsn, op, values]
        for lsn, _, op, values, ordinals in versions:
            folds = (tracked is not None and op == "update" and kept and kept[-1][1] != "delete"
                     and not ordinals & tracked)
            if folds:
                kept[-1][2] = values
            else:
                kept.append([lsn, op, values])
        for i, (lsn, op, values) in enumerate(kept):
            if op == "delete":
                continue
            following = kept[i + 1][0] if i + 1 < len(kept) else None
            rows[(*key, lsn)] = {
                **{c.name: values[c.name] for c in spec.columns},
                "valid_to_lsn": following,
                "is_current": following is None,
                "operation": op,
            }
    return rows


def check_marts(pipeline, sim, upper, history_columns=None, tables=None, transactions=None, soft_deletes=()):
    """The marts equal the expected marts of `transactions` (default: all of the simulator's);
    the tables named in `soft_deletes` keep their deleted keys in the current state."""
    transactions = sim.transactions if transactions is None else transactions
    for spec in tables or CHANGE_TABLES:
        key_order = ", ".join(spec.key)
        expected = current_state(spec, transactions, upper, soft_deletes=spec.name in soft_deletes)
        got = pipeline.table(f"{spec.name}_current", key_order)
        got_by_key = {tuple(r[k] for k in spec.key): r for r in got}
        assert set(got_by_key) == set(expected), f"{spec.name}_current keys differ"
        for key, want in expected.items():
            row = got_by_key[key]
            for column, value in want.items():
                assert row[column] == value, f"{spec.name}_current {key} {column}: {row[column]!r} != {value!r}"
        expected_h = history(spec, transactions, upper, (history_columns or {}).get(spec.name))
        got_h = pipeline.table(f"{spec.name}_history", key_order + ", valid_from_lsn")
        got_h_by_key = {(*[r[k] for k in spec.key], r["valid_from_lsn"]): r for r in got_h}
        assert len(got_h) == len(got_h_by_key), f"{spec.name}_history has duplicate versions"
        assert set(got_h_by_key) == set(expected_h), f"{spec.name}_history versions differ"
        for key, want in expected_h.items():
            row = got_h_by_key[key]
            for column, value in want.items():
                assert row[column] == value, f"{spec.name}_history {key} {column}: {row[column]!r} != {value!r}"


def snapshot_versions(monkeypatch, snapshots: set[int], tables: set[str] | None = None) -> None:
    """Expected marts name a version a snapshot opened `snapshot`, not `insert` (in `tables`, by
    default every table)."""
    original = sys.modules[__name__].transaction_versions

    def versions(spec, txs, upper=None):
        named = tables is None or spec.name in tables
        return {k: [(lsn, t, "snapshot" if named and int(lsn, 16) in snapshots and op == "insert" else op, v, o)
                    for lsn, t, op, v, o in vs] for k, vs in original(spec, txs, upper).items()}

    monkeypatch.setattr(sys.modules[__name__], "transaction_versions", versions)
