"""Update-mask macros against the reference vectors and the DAXGRID SQL Server 2022 answers."""

from __future__ import annotations

import json

import pytest

from tests.conftest import FIXTURES, copy_project

CASES = json.loads((FIXTURES / "reference/cdc/update_mask_cases.json").read_text())["cases"]

EMPLOYEE = {
    "employee": {
        "channel": "change_tables",
        "capture_instance": "dbo_employee",
        "key": ["id"],
        "columns": [
            {"name": "id", "type": "uniqueidentifier", "ordinal": 1},
            {"name": "first_name", "type": "varchar(50)", "ordinal": 2},
            {"name": "last_name", "type": "varchar(50)", "ordinal": 3},
        ],
    }
}


@pytest.fixture(scope="module")
def employee_project(tmp_path_factory):
    return copy_project(tmp_path_factory.mktemp("daxgrid") / "project", EMPLOYEE)


def test_is_bit_set_matches_every_vector(render):
    probes = []
    for case in CASES:
        for ordinal, expected in case.get("is_set", {}).items():
            probes.append((case["mask"], int(ordinal), expected))
    cdcx = next(c for c in CASES if "set_ordinals" in c)
    for ordinal in range(1, 33):
        probes.append((cdcx["mask"], ordinal, ordinal in cdcx["set_ordinals"]))
    values = ", ".join(f"('{m[2:]}', {o})" for m, o, _ in probes)
    rows = render(
        "select mask, ordinal, {{ sqlserver_cdc.is_bit_set('unhex(mask)', 'ordinal') }} as is_set"
        f" from values {values} as t(mask, ordinal)"
    )
    got = {(r["mask"], r["ordinal"]): r["is_set"] for r in rows}
    for mask, ordinal, expected in probes:
        assert got[(mask[2:], ordinal)] is expected, (mask, ordinal)


def test_ordinal_beyond_the_mask_is_not_set_and_null_mask_is_null(render):
    rows = render(
        "select {{ sqlserver_cdc.is_bit_set(\"unhex('01')\", 9) }} as beyond,"
        " {{ sqlserver_cdc.is_bit_set('cast(null as binary)', 1) }} as null_mask"
    )
    # sys.fn_cdc_is_bit_set reads SUBSTRING at a position before the mask: empty, so 0.
    # (Debezium's policy of treating it as changed is a consumer choice, not SQL Server's answer.)
    assert rows == [{"beyond": False, "null_mask": None}]


def test_update_mask_text_forms(render):
    rows = render(
        "select hex({{ sqlserver_cdc.update_mask_normalize(\"'0x00000103'\") }}) as a,"
        " hex({{ sqlserver_cdc.update_mask_normalize(\"'0207'\") }}) as b,"
        " {{ sqlserver_cdc.update_mask_normalize(\"'0x123'\") }} as odd,"
        " {{ sqlserver_cdc.update_mask_invalid_reason(\"'0xZZ'\", '__$update_mask') }} as reason"
    )
    assert rows == [{"a": "00000103", "b": "0207", "odd": None, "reason": "invalid update mask in __$update_mask: 0xZZ"}]


def test_column_ordinal_and_has_column_changed_as_sql_server_answers(render, employee_project):
    daxgrid = json.loads((FIXTURES / "reference/cdc/daxgrid_mssql_cdc_integration_fixture.json").read_text())["expected"]
    ordinals = daxgrid["sys.fn_cdc_get_column_ordinal"]
    sql = "select " + ", ".join(
        f"{{{{ sqlserver_cdc.column_ordinal('dbo_Employee', '{name}') }}}} as {name}" for name in ordinals
    )
    assert render(sql, project_dir=employee_project) == [ordinals]
    changed = daxgrid["sys.fn_cdc_has_column_changed on mask of LAST row of 'all update old'"]
    # UPDATE ... SET last_Name = 'Jensen': only ordinal 3 changed.
    sql = "select " + ", ".join(
        f"{{{{ sqlserver_cdc.has_column_changed('dbo_Employee', '{name}', \"unhex('04')\") }}}} as {name}"
        for name in changed
    )
    assert render(sql, project_dir=employee_project) == [changed]


def test_changed_columns_lists_names_in_ordinal_order(render, employee_project):
    rows = render(
        "select {{ sqlserver_cdc.changed_columns(\"unhex('05')\", 'dbo_employee') }} as some,"
        " {{ sqlserver_cdc.changed_columns(\"unhex('07')\", 'dbo_employee') }} as all_,"
        " {{ sqlserver_cdc.changed_columns(\"unhex('00')\", 'dbo_employee') }} as none_,"
        " {{ sqlserver_cdc.changed_columns('cast(null as binary)', 'dbo_employee') }} as null_",
        project_dir=employee_project,
    )
    assert rows == [{"some": ["id", "last_name"], "all_": ["id", "first_name", "last_name"], "none_": [], "null_": None}]


def test_bit_or_masks_right_aligns_masks_of_different_lengths(render):
    rows = render(
        "select hex({{ sqlserver_cdc.bit_or_masks('unhex(m)') }}) as ored, g from values"
        " ('01', 1), ('0100', 1), ('000002', 1), ('80', 2), (null, 2), (null, 3),"
        " ('8000000000000000000000000000000001', 4), ('02', 4)"
        " as t(m, g) group by g order by g"
    )
    assert rows == [
        {"ored": "000103", "g": 1},
        {"ored": "80", "g": 2},
        {"ored": None, "g": 3},
        {"ored": "8000000000000000000000000000000003", "g": 4},
    ]
