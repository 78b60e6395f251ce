"""A small SQL Server simulator: applies a random DML history to source tables and derives the
change-table rows SQL Server's capture would write (reference section 1): op 2 for inserts,
op 1 for deletes, op 3 + op 4 sharing __$seqval for updates, primary-key updates as delete +
insert, update masks with SQL Server's bit layout, LOB columns NULL in update-before images
unless changed, one commit LSN per transaction. Used by the demo, the tests and the benchmark.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal

from cdc_simulator.tables import Column, TableSpec

LOB_TYPES = ("nvarchar(max)", "varchar(max)", "varbinary(max)")
OLD_LOB_TYPES = ("text", "ntext", "image")


@dataclass
class ChangeRow:
    start_lsn: int
    seqval: int
    operation: int
    update_mask: bytes
    command_id: int
    values: dict[str, object]


@dataclass
class Transaction:
    commit_lsn: int
    begin_lsn: int
    begin_time: datetime
    end_time: datetime
    changes: dict[str, list[ChangeRow]] = field(default_factory=dict)


def lsn_hex(value: int) -> str:
    return f"{value:020X}"


def mask_bytes(ordinals: set[int], n_columns: int) -> bytes:
    value = sum(1 << (o - 1) for o in ordinals)
    return value.to_bytes((n_columns + 7) // 8, "big")


class Simulator:
    """Generates transactions over the given tables; state is the source as of the last commit."""

    def __init__(self, tables: list[TableSpec], seed: int = 7, start_lsn: int = 0x0000002C_00000300_0000,
                 start_time: datetime = datetime(2026, 11, 1, 8, 0, 0)):
        self.tables = {t.name: t for t in tables}
        self.rng = random.Random(seed)
        self.next_lsn = start_lsn
        self.clock = start_time
        self.state: dict[str, dict[tuple, dict[str, object]]] = {t.name: {} for t in tables}
        self.deleted: dict[str, list[dict[str, object]]] = {t.name: [] for t in tables}
        self.transactions: list[Transaction] = []
        self._key_counter: dict[str, int] = {t.name: 0 for t in tables}

    # ---- values -------------------------------------------------------------------------
    def _lsn(self) -> int:
        self.next_lsn += self.rng.choice((1, 2, 3, 0x37, 0x101))
        return self.next_lsn

    def value(self, column: Column) -> object:
        t, rng = column.type.lower(), self.rng
        if t in ("int", "bigint"):
            return rng.randint(0, 10_000)
        if t in ("smallint", "tinyint"):
            return rng.randint(0, 200)
        if t == "bit":
            return rng.random() < 0.5
        if t.startswith(("decimal", "numeric", "money")):
            return Decimal(rng.randint(0, 10_000_000)) / 100
        if t == "date":
            return (self.clock - timedelta(days=rng.randint(0, 4000))).date()
        if t.startswith(("binary(", "varbinary(")) and t not in LOB_TYPES:
            return bytes(rng.getrandbits(8) for _ in range(rng.randint(1, 16)))
        if t.startswith(("datetime", "date")):
            return (self.clock - timedelta(seconds=rng.randint(0, 10**6))).replace(microsecond=rng.randint(0, 999) * 1000)
        if t.startswith("char"):
            return "".join(rng.choice("ABCDEFGH0123456789") for _ in range(8))
        if t in LOB_TYPES or t in OLD_LOB_TYPES:
            if rng.random() < 0.2:
                return None
            return "note " + " ".join(rng.choice(("ß", "é", "漢字", "x" * 40, "long", "text")) for _ in range(rng.randint(1, 12)))
        words = ("Ana", "Bo", "Chen", "Dana", "Émile", "Farah", "Gus", "Hiro", "O'Brien", "Zoë")
        return f"{rng.choice(words)} {rng.choice(words)}{rng.randint(1, 99)}"

    def _new_key(self, table: TableSpec) -> tuple:
        self._key_counter[table.name] += 1
        n = self._key_counter[table.name]
        if len(table.key) == 1:
            return (n,)
        return (1000 + n // 3, n % 3 + 1)

    # ---- change rows --------------------------------------------------------------------
    def _all_mask(self, table: TableSpec) -> bytes:
        return mask_bytes({c.ordinal for c in table.columns}, len(table.columns))

    def _insert(self, tx: Transaction, table: TableSpec, row: dict[str, object]) -> None:
        self.state[table.name][tuple(row[k] for k in table.key)] = dict(row)
        tx.changes.setdefault(table.name, []).append(
            ChangeRow(0, self._lsn(), 2, self._all_mask(table), self._command(tx), dict(row)))

    def _delete(self, tx: Transaction, table: TableSpec, key: tuple) -> None:
        row = self.state[table.name].pop(key)
        self.deleted[table.name].append(row)
        image = {c.name: (None if c.type.lower() in OLD_LOB_TYPES else row[c.name]) for c in table.columns}
        tx.changes.setdefault(table.name, []).append(
            ChangeRow(0, self._lsn(), 1, self._all_mask(table), self._command(tx), image))

    def _update(self, tx: Transaction, table: TableSpec, key: tuple, changed: list[Column]) -> None:
        old = self.state[table.name][key]
        new = dict(old)
        for c in changed:
            new[c.name] = self.value(c)
        self.state[table.name][key] = new
        ordinals = {c.ordinal for c in changed}
        mask = mask_bytes(ordinals, len(table.columns))
        before = {}
        for c in table.columns:
            t = c.type.lower()
            lob_hidden = t in OLD_LOB_TYPES or (t in LOB_TYPES and c.ordinal not in ordinals)
            before[c.name] = None if lob_hidden else old[c.name]
        seqval, command = self._lsn(), self._command(tx)
        rows = tx.changes.setdefault(table.name, [])
        rows.append(ChangeRow(0, seqval, 3, mask, command, before))
        rows.append(ChangeRow(0, seqval, 4, mask, command, new))

    def _command(self, tx: Transaction) -> int:
        return sum(len(v) for v in tx.changes.values()) + 1

    # ---- transactions -------------------------------------------------------------------
    def transaction(self, statements: int | None = None, kinds: tuple[str, ...] | None = None) -> Transaction:
        """One committed transaction of `statements` random statements (of `kinds` only, when
        given: insert, update, delete, reinsert, pk_update)."""
        begin = self._lsn()
        self.clock += timedelta(milliseconds=self.rng.randint(5, 4000))
        tx = Transaction(0, begin, self.clock, self.clock)
        for _ in range(statements or self.rng.randint(1, 4)):
            self._statement(tx, self.rng.choice(list(self.tables.values())), kinds)
        tx.commit_lsn = self._lsn()
        # commit order is LSN order is commit-time order
        previous = self.transactions[-1].end_time if self.transactions else self.clock
        tx.end_time = max(previous + timedelta(milliseconds=1), self.clock + timedelta(milliseconds=self.rng.randint(0, 50)))
        for rows in tx.changes.values():
            for r in rows:
                r.start_lsn = tx.commit_lsn
        self.transactions.append(tx)
        return tx

    def _statement(self, tx: Transaction, table: TableSpec, kinds: tuple[str, ...] | None = None) -> None:
        rng, live = self.rng, self.state[table.name]
        weights = {"insert": 35, "update": 40, "delete": 12, "reinsert": 6, "pk_update": 7}
        allowed = [k for k in weights if kinds is None or k in kinds]
        kind = rng.choices(allowed, [weights[k] for k in allowed])[0]
        if kind in ("update", "delete", "pk_update") and not live:
            return  # nothing to change in this table yet
        if kind == "reinsert" and not self.deleted[table.name]:
            return
        if kind == "insert":
            for _ in range(rng.randint(1, 3)):  # multi-row INSERT
                key = self._new_key(table)
                row = {c.name: self.value(c) for c in table.columns}
                row.update(dict(zip(table.key, key)))
                self._insert(tx, table, row)
        elif kind == "reinsert":
            row = self.deleted[table.name].pop(rng.randrange(len(self.deleted[table.name])))
            key = tuple(row[k] for k in table.key)
            if key not in live:
                row = dict(row)
                for c in table.non_key:
                    if rng.random() < 0.5:
                        row[c.name] = self.value(c)
                self._insert(tx, table, row)
        elif kind == "update":
            keys = rng.sample(sorted(live), k=min(len(live), rng.randint(1, 3)))  # multi-row UPDATE
            changed = rng.sample(table.non_key, k=rng.randint(1, min(3, len(table.non_key))))
            for key in keys:
                self._update(tx, table, key, changed)
        elif kind == "delete":
            for key in rng.sample(sorted(live), k=min(len(live), rng.randint(1, 2))):
                self._delete(tx, table, key)
        else:  # primary-key update: captured as delete of the old key and insert of the new key
            key = rng.choice(sorted(live))
            row = dict(live[key])
            new_key = self._new_key(table)
            self._delete(tx, table, key)
            self.deleted[table.name].pop()
            row.update(dict(zip(table.key, new_key)))
            self._insert(tx, table, row)

    def run(self, n_transactions: int) -> list[Transaction]:
        return [self.transaction() for _ in range(n_transactions)]


def replay(tables: list[TableSpec], transactions: list[Transaction], upper_lsn: int | None = None):
    """The source tables as of upper_lsn, rebuilt from the change rows alone."""
    state: dict[str, dict[tuple, dict]] = {t.name: {} for t in tables}
    specs = {t.name: t for t in tables}
    for tx in transactions:
        if upper_lsn is not None and tx.commit_lsn > upper_lsn:
            break
        for name, rows in tx.changes.items():
            spec = specs[name]
            for r in sorted(rows, key=lambda r: (r.seqval, r.operation)):
                key = tuple(r.values[k] for k in spec.key)
                if r.operation == 1:
                    state[name].pop(key, None)
                elif r.operation in (2, 4):
                    state[name][key] = dict(r.values)
    return state
