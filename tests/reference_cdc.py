"""A small, independent Python statement of SQL Server's all-changes and net-changes functions
(reference sections 4 and 5), used as the oracle of the property tests."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Row:
    commit_lsn: int
    seqval: int
    command_id: int
    operation: int
    mask: int  # the update mask as a big-endian integer
    values: tuple


def all_changes(rows: list[Row], lo: int, hi: int, row_filter: str) -> list[Row]:
    window = [r for r in rows if lo <= r.commit_lsn <= hi]
    if row_filter == "all":
        window = [r for r in window if r.operation != 3]
    return sorted(window, key=lambda r: (r.commit_lsn, r.seqval, r.command_id, r.operation))


def net_changes(rows: list[Row], key_of, lo: int, hi: int, row_filter: str) -> dict[tuple, tuple]:
    """key -> (commit_lsn, operation, mask or None, values)."""
    by_key: dict[tuple, list[Row]] = {}
    for r in rows:
        if lo <= r.commit_lsn <= hi:
            by_key.setdefault(key_of(r), []).append(r)
    out = {}
    for key, key_rows in by_key.items():
        count = len(key_rows)
        main = sorted((r for r in key_rows if r.operation in (1, 2, 4)), key=lambda r: (r.commit_lsn, r.seqval, r.command_id))
        last, first_op = main[-1], main[0].operation
        or_mask = 0
        for r in key_rows:
            or_mask |= r.mask
        if last.operation == 1 and first_op == 2:
            continue
        if row_filter == "all with merge":
            op = 1 if last.operation == 1 else 5
        elif count == 1:
            op = last.operation
        elif first_op == 2:
            op = 2
        elif last.operation == 1:
            op = 1
        else:
            op = 4
        mask = None
        if row_filter == "all with mask":
            if count == 1:
                mask = last.mask if last.operation == 4 else None
            elif not (first_op == 2 or last.operation == 1):
                mask = or_mask
        out[key] = (last.commit_lsn, op, mask, last.values)
    return out
