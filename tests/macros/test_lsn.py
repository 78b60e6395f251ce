"""LSN macros against the reference vectors (tests/fixtures/reference/cdc/lsn_cases.json)."""

from __future__ import annotations

import json

import pytest

from tests.conftest import FIXTURES

CASES = json.loads((FIXTURES / "reference/cdc/lsn_cases.json").read_text())


def _values(items: list[str]) -> str:
    return ", ".join("('" + i.replace("'", "''") + "')" for i in items)


def _normalize(render, inputs: list[str]) -> dict[str, str | None]:
    rows = render(
        "select input, {{ sqlserver_cdc.lsn_normalize('input') }} as lsn from values "
        + _values(inputs) + " as t(input)"
    )
    return {r["input"]: r["lsn"] for r in rows}


def test_every_text_form_normalizes_to_the_same_canonical_value(render):
    forms = {f["form"]: f for f in CASES["string_forms"]}
    inputs = forms["debezium change_lsn/commit_lsn/transaction.id"]["examples"] + forms[
        "CES transaction.commitlsn / beginlsn"]["examples"] + forms[
        "T-SQL binary literal / CONVERT(varchar(22), lsn, 1)"]["examples"]
    got = _normalize(render, inputs)
    for text in inputs:
        expected = text.replace("0x", "").replace(":", "").upper()
        assert got[text] == expected


def test_logicalid_gives_the_commit_lsn(render):
    evidence = next(f for f in CASES["string_forms"] if f["form"] == "CES logicalid")["evidence"]
    got = _normalize(render, [e["logicalid"] for e in evidence])
    for e in evidence:
        assert got[e["logicalid"]] == e["commitlsn"].replace(":", "")


def test_numeric_lsns_convert_and_invalid_ones_give_null(render):
    vectors = [v for v in CASES["numeric_to_binary"] if "numeric" in v]
    invalid = [s.split(" ")[0] for v in CASES["numeric_to_binary"] if "numeric_invalid" in v for s in v["numeric_invalid"]]
    got = _normalize(render, [v["numeric"] for v in vectors] + invalid)
    for v in vectors:
        assert got[v["numeric"]] == v["binary"][2:]
    for text in invalid:
        assert got[text] is None, text


def test_binary_lsns_normalize(render):
    rows = render(
        "select {{ sqlserver_cdc.lsn_normalize(\"unhex('0000002C00000300017C')\") }} as ok,"
        " {{ sqlserver_cdc.lsn_normalize(\"unhex('0000002C000003')\") }} as short"
    )
    assert rows == [{"ok": "0000002C00000300017C", "short": None}]


@pytest.mark.parametrize("text", ["", "0x", "0x0000002C00000300017", "zz000000:00000000:0000", "0000002c:00000300",
                                  "1bf2756a-c15f-4d2e-a2d5-7d3f9dbf85b0:000000B1000008A80007", "-1"])
def test_malformed_lsn_text_is_null_with_a_reason(render, text):
    rows = render(
        "select {{ sqlserver_cdc.lsn_normalize('input') }} as lsn, "
        "{{ sqlserver_cdc.lsn_invalid_reason('input', '__$start_lsn') }} as reason from values "
        + _values([text]) + " as t(input)"
    )
    assert rows[0]["lsn"] is None
    assert rows[0]["reason"] == f"invalid LSN in __$start_lsn: {text}"


def test_ordering_vectors_hold_on_the_canonical_form(render):
    hexes = next(v for v in CASES["ordering_vectors"] if "ascending" in v)["ascending"]
    numerics = next(v for v in CASES["ordering_vectors"] if "ascending_numeric" in v)["ascending_numeric"]
    for ascending in (hexes, numerics):
        got = _normalize(render, ascending)
        canonical = [got[x] for x in ascending]
        assert canonical == sorted(canonical) and len(set(canonical)) == len(canonical)
    rows = render(
        "select {{ sqlserver_cdc.lsn_compare(\"'0000003D000019B80004'\", \"'0000003D000019F00011'\") }} as lt,"
        " {{ sqlserver_cdc.lsn_compare(\"'0000003D000019F00011'\", \"'0000003D000019F00011'\") }} as eq,"
        " {{ sqlserver_cdc.lsn_compare(\"'0000003D00001A500003'\", \"'0000003D000019F00011'\") }} as gt"
    )
    assert rows == [{"lt": -1, "eq": 0, "gt": 1}]


def test_increment_and_decrement_carry_across_all_80_bits(render):
    faucet = CASES["increment"]["independent_implementations_all_plus_one_with_carry"][1]
    pairs = [(a.upper(), b.upper()) for a, b in faucet["tests"]]
    pairs += [
        ("000000000000000000FF", "00000000000000000100"),
        ("0000002C00000300FFFF", "0000002C000003010000"),
        ("0000002CFFFFFFFFFFFF", "0000002D000000000000"),
        ("00000000FFFFFFFFFFFF", "00000001000000000000"),
        ("0000000000FFFFFFFFFF", "00000000010000000000"),
        ("FFFFFFFFFEFFFFFFFFFF", "FFFFFFFFFF0000000000"),
    ]
    inputs = [a for a, _ in pairs] + [b for _, b in pairs] + ["FFFFFFFFFFFFFFFFFFFF", "00000000000000000000"]
    rows = render(
        "select input, {{ sqlserver_cdc.lsn_increment('input') }} as inc, {{ sqlserver_cdc.lsn_decrement('input') }} as dec"
        " from values " + _values(inputs) + " as t(input)"
    )
    by_input = {r["input"]: r for r in rows}
    for a, b in pairs:
        assert by_input[a]["inc"] == b, a
        assert by_input[b]["dec"] == a, b
    assert by_input["FFFFFFFFFFFFFFFFFFFF"]["inc"] is None
    assert by_input["00000000000000000000"]["dec"] is None
    for start, expected in faucet["decrement_tests"]:
        assert by_input[start.upper()]["dec"] == expected.upper()


def test_parts_and_formats(render):
    rows = render(
        "select {{ sqlserver_cdc.lsn_parts(\"'0000239E000077BA0001'\") }} as parts,"
        " {{ sqlserver_cdc.lsn_format(\"'0000002C00000300017C'\", 'tsql') }} as tsql,"
        " {{ sqlserver_cdc.lsn_format(\"'0000002C00000300017C'\", 'debezium') }} as debezium,"
        " {{ sqlserver_cdc.lsn_format(\"'0000002C00000300017C'\", 'ces') }} as ces,"
        " cast({{ sqlserver_cdc.lsn_format(\"'0000239E000077BA0001'\", 'numeric') }} as string) as numeric"
    )
    assert rows == [{
        "parts": {"vlf": 0x239E, "block": 0x77BA, "slot": 1},
        "tsql": "0x0000002C00000300017C",
        "debezium": "0000002c:00000300:017c",
        "ces": "0000002C:00000300:017C",
        "numeric": "9118000003065000001",
    }]
