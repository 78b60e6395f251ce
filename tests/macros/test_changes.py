"""all_changes / net_changes: the DAXGRID fixture (answers of a real SQL Server 2022) and a
property test against tests/reference_cdc.py on random DML histories."""

from __future__ import annotations

import json
import random

import pytest

from cdc_simulator.simulate import Column, Simulator, TableSpec, lsn_hex
from tests import reference_cdc
from tests.conftest import FIXTURES, compile_sql

DAXGRID = json.loads((FIXTURES / "reference/cdc/daxgrid_mssql_cdc_integration_fixture.json").read_text())
CHANGE_COLUMNS = "commit_lsn string, change_lsn string, command_id int, operation_code int, update_mask binary"


@pytest.fixture(scope="module")
def daxgrid(spark):
    # The fixture's setup: INSERT one employee, then UPDATE last_name (ordinal 3) in a second
    # transaction. Insert rows have every bit set; the update pair carries bit 3.
    rows = [
        ("0000002C000000A00004", "0000002C000000A00002", 1, 2, bytes([0x07]), "653F11DF-EE89-4E17-AC01-D6542F007EA1", "Rune", "Nielsen"),
        ("0000002C000000B00005", "0000002C000000B00002", 1, 3, bytes([0x04]), "653F11DF-EE89-4E17-AC01-D6542F007EA1", "Rune", "Nielsen"),
        ("0000002C000000B00005", "0000002C000000B00002", 1, 4, bytes([0x04]), "653F11DF-EE89-4E17-AC01-D6542F007EA1", "Rune", "Jensen"),
    ]
    spark.createDataFrame(rows, CHANGE_COLUMNS + ", id string, first_name string, last_name string") \
        .createOrReplaceTempView("daxgrid_changes")
    return DAXGRID["expected"]


def _ops(rows, with_mask=False):
    keep = ("operation_code", "first_name", "last_name") + (("update_mask",) if with_mask else ())
    return [{k: r[k] for k in keep} for r in rows]


@pytest.mark.parametrize("row_filter", ["all", "all update old"])
def test_all_changes_match_sql_server(render, daxgrid, row_filter):
    expected = daxgrid[f"fn_cdc_get_all_changes '{row_filter}'" if row_filter != "all" else "fn_cdc_get_all_changes 'all"]
    rows = render(
        "select * from {{ sqlserver_cdc.all_changes('daxgrid_changes', ['id', 'first_name', 'last_name'], '"
        + row_filter + "', \"'0000002C000000A00004'\", \"'0000002C000000B00005'\") }}"
    )
    assert _ops(rows) == [{"operation_code": e["__$operation"], "first_name": e["first_name"], "last_name": e["last_name"]}
                          for e in expected]


@pytest.mark.parametrize("row_filter", ["all", "all with mask", "all with merge"])
def test_net_changes_match_sql_server(render, daxgrid, row_filter):
    expected = daxgrid[f"fn_cdc_get_net_changes '{row_filter}'"]
    rows = render(
        "select * from {{ sqlserver_cdc.net_changes('daxgrid_changes', ['id'], ['id', 'first_name', 'last_name'], '"
        + row_filter + "') }}"
    )
    assert _ops(rows, with_mask=True) == [
        {"operation_code": e["__$operation"], "first_name": e["first_name"], "last_name": e["last_name"],
         "update_mask": e["__$update_mask"]} for e in expected
    ]


def test_unknown_row_filter_is_a_clear_compile_error():
    with pytest.raises(AssertionError, match="row_filter must be 'all', 'all with mask' or 'all with merge'"):
        compile_sql("select * from {{ sqlserver_cdc.net_changes('x', ['id'], ['id'], 'all with merge please') }}")


# ---- property test ------------------------------------------------------------------------

WIDE = TableSpec(
    "wide", "dbo_wide", ("k1", "k2"),
    (Column("k1", "int", 1), Column("k2", "int", 2),
     *(Column(f"c{i}", "nvarchar(max)" if i == 9 else "int", i) for i in range(3, 12))),
)
NAMES = [c.name for c in WIDE.columns]


def _history(seed: int, n_transactions: int):
    sim = Simulator([WIDE], seed=seed)
    sim.run(n_transactions)
    rows = []
    for tx in sim.transactions:
        for r in tx.changes.get("wide", []):
            values = tuple(None if r.values[c] is None else str(r.values[c]) for c in NAMES)
            rows.append(reference_cdc.Row(tx.commit_lsn, r.seqval, r.command_id, r.operation,
                                          int.from_bytes(r.update_mask, "big"), values))
    return sim, rows


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_all_and_net_changes_agree_with_the_reference_on_random_histories(spark, seed):
    _, rows = _history(seed, 700)
    assert len(rows) > 1500
    mask_len = (len(NAMES) + 7) // 8
    spark.createDataFrame(
        [(lsn_hex(r.commit_lsn), lsn_hex(r.seqval), r.command_id, r.operation, r.mask.to_bytes(mask_len, "big"), *r.values)
         for r in rows],
        CHANGE_COLUMNS + ", " + ", ".join(f"{c} string" for c in NAMES),
    ).createOrReplaceTempView("wide_changes")
    columns = "[" + ", ".join(f"'{c}'" for c in NAMES) + "]"
    queries = {
        ("net", f): compile_sql("select * from {{ sqlserver_cdc.net_changes('wide_changes', ['k1', 'k2'], " + columns
                       + f", '{f}', \"'__LO__'\", \"'__HI__'\") }}}}")
        for f in ("all", "all with mask", "all with merge")
    }
    queries.update({
        ("all", f): compile_sql("select * from {{ sqlserver_cdc.all_changes('wide_changes', " + columns
                       + f", '{f}', \"'__LO__'\", \"'__HI__'\") }}}}")
        for f in ("all", "all update old")
    })
    rng = random.Random(seed)
    commits = sorted({r.commit_lsn for r in rows})
    windows = [(commits[0], commits[-1])]
    for _ in range(5):
        a, b = sorted(rng.sample(range(len(commits)), 2))
        windows.append((commits[a] + rng.choice((0, 1)), commits[b] - rng.choice((0, 0, 1))))
    for lo, hi in windows:
        for (function, row_filter), sql in queries.items():
            got = [r.asDict() for r in spark.sql(sql.replace("__LO__", lsn_hex(lo)).replace("__HI__", lsn_hex(hi))).collect()]
            if function == "all":
                want = reference_cdc.all_changes(rows, lo, hi, row_filter)
                assert [(int(g["commit_lsn"], 16), int(g["change_lsn"], 16), g["operation_code"],
                         int.from_bytes(g["update_mask"], "big"), tuple(g[c] for c in NAMES)) for g in got] == \
                    [(w.commit_lsn, w.seqval, w.operation, w.mask, w.values) for w in want], (row_filter, lo, hi)
            else:
                want = reference_cdc.net_changes(rows, lambda r: (r.values[0], r.values[1]), lo, hi, row_filter)
                got_by_key = {(g["k1"], g["k2"]): (int(g["commit_lsn"], 16), g["operation_code"],
                              None if g["update_mask"] is None else int.from_bytes(g["update_mask"], "big"),
                              tuple(g[c] for c in NAMES)) for g in got}
                assert len(got_by_key) == len(got)
                assert got_by_key == want, (row_filter, lo, hi)
