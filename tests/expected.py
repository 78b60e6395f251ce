"""Expected marts computed in plain Python from a simulated history: an independent statement
of what the current-state and history marts must contain."""

from __future__ import annotations

from runner.simulate import TableSpec, Transaction, lsn_hex


def _key(spec: TableSpec, values: dict) -> tuple:
    return tuple(values[k] for k in spec.key)


def transaction_versions(spec: TableSpec, transactions: list[Transaction], upper: int | None = None):
    """Per key, the committed versions: (commit_lsn, end_time, net op name, values)."""
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
            versions.setdefault(key, []).append((lsn_hex(tx.commit_lsn), tx.end_time, name, rows[-1].values))
    return versions


def current_state(spec: TableSpec, transactions: list[Transaction], upper: int | None = None) -> dict[tuple, dict]:
    state = {}
    for key, versions in transaction_versions(spec, transactions, upper).items():
        lsn, _, op, values = versions[-1]
        if op != "delete":
            state[key] = {**{c.name: values[c.name] for c in spec.columns}, "commit_lsn": lsn, "operation": op}
    return state


def history(spec: TableSpec, transactions: list[Transaction], upper: int | None = None) -> dict[tuple, dict]:
    """(key..., valid_from_lsn) -> expected history row."""
    rows = {}
    for key, versions in transaction_versions(spec, transactions, upper).items():
        for i, (lsn, _, op, values) in enumerate(versions):
            if op == "delete":
                continue
            following = versions[i + 1][0] if i + 1 < len(versions) else None
            rows[(*key, lsn)] = {
                **{c.name: values[c.name] for c in spec.columns},
                "valid_to_lsn": following,
                "is_current": following is None,
                "operation": op,
            }
    return rows
