"""The project's SparkSession (profiles.yml's `local` target, as the runner and the tests create it)
answers the query shapes that exhaust a bounded thread pool of Spark's: a thread of the
shuffle-exchange, query-stage or subquery pool waits for subqueries whose own plans need threads
of the same pools, so a pool capped below what a query starts at once deadlocks it (docs/performance.md
"Thread pools"). Each query runs in a thread of its own; one that does not answer within
HANG seconds fails the test with the JVM's threads by pool, instead of hanging the suite. And the
session's JVM prints nothing of its own on a healthy start (Java's notice of the incubating module
Spark's launcher adds is held back; Spark's log, errors only)."""

from __future__ import annotations

import collections
import os
import re
import subprocess
import threading

import pytest

from runner.spark.session import JVM_CONSOLE_NOTICES, JVM_NOTICES, pass_on

# a hang detector, not a timing: each query answers in 15-40 s on two cores
HANG = 600
BRANCHES = 24


def _answer(spark, sql: str) -> int:
    result: dict = {}

    def count() -> None:
        try:
            result["rows"] = spark.sql(sql).count()
        except Exception as exc:  # noqa: BLE001 - reported by the assertion below
            result["error"] = exc

    worker = threading.Thread(target=count, daemon=True)
    worker.start()
    worker.join(HANG)
    if worker.is_alive():
        spark.sparkContext.cancelAllJobs()
        pytest.fail(f"the query did not answer within {HANG} s; the JVM's threads by pool: {_pools(spark)}")
    assert "error" not in result, result.get("error")
    return result["rows"]


def _pools(spark) -> list[tuple[str, int]]:
    pid = spark._jvm.java.lang.ProcessHandle.current().pid()
    dump = subprocess.run(["jcmd", str(pid), "Thread.print"], capture_output=True, text=True, check=False).stdout
    return collections.Counter(re.sub(r"-\d+$", "", name) for name in re.findall(r'^"([^"]+)"', dump, re.MULTILINE)).most_common(8)


@pytest.fixture(scope="module")
def numbers(spark):
    """t: 20,000 rows, k = id % 97, v = id (the issue's table); adaptive query execution on, as the
    profile has it (the tests' session turns it off: tests/conftest.py TEST_CONF), for its query
    stages and their pool are part of what is tested."""
    spark.range(20000).selectExpr("id % 97 as k", "id as v").createOrReplaceTempView("pool_t")
    before = spark.conf.get("spark.sql.adaptive.enabled")
    spark.conf.set("spark.sql.adaptive.enabled", "true")
    yield "pool_t"
    spark.conf.set("spark.sql.adaptive.enabled", before)
    spark.catalog.dropTempView("pool_t")


def _expected(branches: int, nested: bool) -> int:
    """The rows the union returns, computed in Python: per branch i, the keys of the rows whose v is
    at least min over keys of count(v % (i + 2) = 0) minus i (nested: of the rows above the
    smallest v of key i)."""
    rows = 0
    for i in range(branches):
        floor = i if nested else -1  # min(v) where k = i is i
        counts = collections.Counter(v % 97 for v in range(20000) if v % (i + 2) == 0 and v > floor)
        bound = min(counts.values()) - i
        rows += len({v % 97 for v in range(20000) if v >= bound})
    return rows


def test_many_scalar_subqueries_below_shuffles_answer(spark, numbers):
    """The issue's query: 24 branches, each filtering by a scalar subquery over a GROUP BY and then
    grouping. With the shuffle-exchange pool capped at 16 threads (the profile before) all 16
    waited for subqueries whose shuffle stages needed a 17th: it never answered."""
    sql = " union all ".join(
        f"select {i} as b, k, count(*) as c from {numbers} where v >= (select min(c2) - {i} from "
        f"(select k, count(*) as c2 from {numbers} where v % ({i} + 2) = 0 group by k)) group by k"
        for i in range(BRANCHES))
    assert _answer(spark, sql) == _expected(BRANCHES, nested=False)


def test_scalar_subqueries_holding_subqueries_below_shuffles_answer(spark, numbers):
    """The same branches, each subquery holding a scalar subquery of its own: Spark's own
    subquery pool of 16 threads (the default) deadlocks it (16 outer subqueries wait for stages
    whose inner subqueries are queued behind them); the profile raises it to 128, Spark's most."""
    sql = " union all ".join(
        f"select {i} as b, k, count(*) as c from {numbers} where v >= (select min(c2) - {i} from "
        f"(select k, count(*) as c2 from {numbers} where v % ({i} + 2) = 0 "
        f"and v > (select min(v) from {numbers} where k = {i}) group by k)) group by k"
        for i in range(BRANCHES))
    assert _answer(spark, sql) == _expected(BRANCHES, nested=True)


def test_the_jvms_standard_error_passes_on_but_javas_incubator_notice():
    """pass_on copies every line the JVM writes, a partial last line and lines that are not UTF-8
    among them, but JVM_NOTICES."""
    jvm_read, jvm_write = os.pipe()
    out_read, out_write = os.pipe()
    notice = next(iter(JVM_NOTICES))
    os.write(jvm_write, f"{notice}\n12:00:01 ERROR Executor: task failed\n".encode() + b"\xff bytes\n"
             + f"{notice}\nWARNING: Using incubator modules: jdk.incubator.foreign\nno newline".encode())
    os.close(jvm_write)
    pass_on(jvm_read, out_write)
    os.close(out_write)
    with os.fdopen(out_read, "rb") as passed:
        assert passed.read() == (b"12:00:01 ERROR Executor: task failed\n\xff bytes\n"
                                 b"WARNING: Using incubator modules: jdk.incubator.foreign\nno newline")


def test_the_jvms_standard_output_passes_on_but_deltas_vacuum_count():
    """Delta prints VACUUM's count on the JVM's standard output (a maintenance pass reports it
    itself): that line goes, every other line (a similar one among them) passes on."""
    jvm_read, jvm_write = os.pipe()
    out_read, out_write = os.pipe()
    os.write(jvm_write, b"Deleted 12 files and directories in a total of 3 directories.\n"
             b"Deleted 12 files and directories in a total of 3 directories. And more\nsomething else\n")
    os.close(jvm_write)
    pass_on(jvm_read, out_write, frozenset(), JVM_CONSOLE_NOTICES)
    os.close(out_write)
    with os.fdopen(out_read, "rb") as passed:
        assert passed.read() == b"Deleted 12 files and directories in a total of 3 directories. And more\nsomething else\n"
