"""Commit times in UTC from the source server's time zone (docs/tables.md "Time zones"): SQL
Server writes lsn_time_mapping's and CES's commit times in its own wall clock, Debezium in UTC."""

from __future__ import annotations

from datetime import datetime

import pytest

from tests.conftest import compile_sql

NEW_YORK = {"cdc_source_time_zone": "America/New_York"}
# commit LSN order across the 2026-11-01 fall-back in New York (01:00-02:00 happens twice): the
# first pass at -04:00, then the clock steps back and the second pass at -05:00
WALL_CLOCK = [(1, "2026-11-01 00:59:00"), (2, "2026-11-01 01:50:00"), (3, "2026-11-01 01:10:00"),
              (4, "2026-11-01 01:55:00"), (5, "2026-11-01 02:05:00")]
ROWS = "(select * from values " + ", ".join(
    f"({lsn}, timestamp'{t}', timestamp'{t}')" for lsn, t in WALL_CLOCK) + " as v(lsn, local_begin, local_end))"
SQL = ("select lsn, tran_begin_time, tran_end_time from ({{ sqlserver_cdc._source_commit_times(\"" + ROWS
       + "\", 'local_begin', 'local_end', 'lsn') }}) order by lsn")


def test_utc_is_the_default_and_leaves_times_as_written(render):
    got = render(SQL)
    assert [r["tran_end_time"] for r in got] == [datetime.fromisoformat(t) for _, t in WALL_CLOCK]
    assert "to_utc_timestamp" not in compile_sql(SQL)


def test_a_server_time_zone_gives_utc_and_a_fall_back_keeps_lsn_order(render):
    got = render(SQL, NEW_YORK)
    assert [r["tran_end_time"] for r in got] == [
        datetime(2026, 11, 1, 4, 59), datetime(2026, 11, 1, 5, 50),  # -04:00
        datetime(2026, 11, 1, 6, 10), datetime(2026, 11, 1, 6, 55),  # the repeated hour's second pass, -05:00
        datetime(2026, 11, 1, 7, 5)]
    times = [r["tran_end_time"] for r in got]
    assert times == sorted(times)
    # begin times are converted alone (the earlier offset in the repeated hour)
    assert got[0]["tran_begin_time"] == datetime(2026, 11, 1, 4, 59)
    summer = render("select {{ sqlserver_cdc._source_time_to_utc(\"timestamp'2026-07-01 12:00:00'\") }} as t",
                    {"cdc_source_time_zone": "Europe/Berlin"})
    assert summer == [{"t": datetime(2026, 7, 1, 10, 0)}]
    fixed = render("select {{ sqlserver_cdc._source_time_to_utc(\"timestamp'2026-07-01 12:00:00'\") }} as t",
                   {"cdc_source_time_zone": "+05:30"})
    assert fixed == [{"t": datetime(2026, 7, 1, 6, 30)}]


@pytest.mark.parametrize("zone", ["Mars/Olympus", "EST5", "+25:00"])
def test_an_unknown_time_zone_is_refused_naming_the_var(zone):
    with pytest.raises(AssertionError, match=f"var cdc_source_time_zone: '{zone.replace('+', '[+]')}' is not a time zone"):
        compile_sql(SQL, {"cdc_source_time_zone": zone})
