"""The resident runner (`python -m runner serve`, runner/run/serve.py, runner/run/metrics.py): when
it runs, how it goes on after a failed run and stops on a signal, and what its metrics and health
say. The loop is driven here with fake runs (milliseconds); tests/pipeline/test_faults.py runs the
real service in a process."""

from __future__ import annotations

import signal
import urllib.error
import urllib.request
from types import SimpleNamespace

import pytest

from runner.errors import InfrastructureError, UsageError
from runner.run.metrics import Metrics
from runner.run.serve import Stop, Trigger, serve


class Quiet:
    def __init__(self):
        self.lines: list[str] = []

    def step(self, line: str) -> None:
        self.lines.append(line)


def test_a_run_at_start_every_interval_and_when_new_files_settle():
    t = Trigger(every=60)
    assert t.due(0, {"a.csv": (1, 1)})  # at start
    t.ran(0, {"a.csv": (1, 1)})
    assert not t.due(1, {"a.csv": (1, 1)})  # nothing new
    assert not t.due(2, {"a.csv": (1, 1), "b.csv": (5, 1)})  # b appeared: it must hold still one poll
    assert not t.due(3, {"a.csv": (1, 1), "b.csv": (9, 2)})  # still growing
    assert t.due(4, {"a.csv": (1, 1), "b.csv": (9, 2)})  # settled
    t.ran(4, {"a.csv": (1, 1), "b.csv": (9, 2)})
    assert not t.due(5, {"a.csv": (1, 1), "b.csv": (9, 2)})
    assert t.due(64, {"a.csv": (1, 1), "b.csv": (9, 2)})  # the interval
    # no landing folder (Kafka alone): the interval only
    k = Trigger(every=10)
    assert k.due(0, None)
    k.ran(0, None)
    assert not k.due(5, None) and not k.due(6, None) and k.due(10, None)


def test_kafka_sources_trigger_a_run_as_soon_as_their_end_offsets_move():
    t = Trigger(every=60)
    ends = {"hub/t/0": 5, "hub/t/1": 7}
    assert t.due(0, None, ends)
    t.ran(0, None, ends)
    assert not t.due(1, None, dict(ends))  # nothing new
    assert t.due(2, None, {**ends, "hub/t/1": 8})  # a record: at once, no settling
    t.ran(2, None, {**ends, "hub/t/1": 8})
    assert t.due(3, None, {**ends, "hub/t/1": 8, "hub/t/2": 0})  # a new partition
    # a broker that does not answer triggers nothing, and does not forget what the last run read
    t.ran(3, None, {**ends, "hub/t/1": 8, "hub/t/2": 0})
    assert not t.due(4, None, None) and not t.due(5, None, {**ends, "hub/t/1": 8, "hub/t/2": 0})
    t.ran(63, None, None)
    assert t.ran_offsets == {**ends, "hub/t/1": 8, "hub/t/2": 0}


def _args(**given):
    return SimpleNamespace(**{"every": 60, "poll": 0, "max_failures": 2, "metrics_port": None, "metrics_host": "127.0.0.1",
                              **given})


def test_a_failed_run_is_reported_and_the_service_goes_on_until_a_signal_stops_it_after_the_run():
    """Runs fail (a refused file, a usage error), succeed, find nothing new; health follows them;
    SIGTERM during a run lets it finish, and the service exits 0."""
    progress, metrics = Quiet(), Metrics(max_failures=2)
    listings = iter([{"a": 1}, {"a": 1}, {"a": 2}, {"a": 2}, {"a": 3}, {"a": 3}, {"a": 4}, {"a": 4}])
    row = {"tracked_table": "t", "changes_applied": 3, "rows_landed": 4, "quarantined": 1, "lag_seconds": 7,
           "headroom_seconds": None}
    outcomes = [("failed", [row], "1 landing file(s) were refused"), UsageError("bad declaration"),
                ("succeeded", [row], ""), "stop"]
    health = []  # before each run: the health the runs before it left

    def run(listed):
        health.append(metrics.health()[0])
        outcome = outcomes.pop(0)
        if outcome == "stop":
            signal.raise_signal(signal.SIGTERM)  # during the run: it finishes
            return "nothing_to_do", [], ""
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    try:
        assert serve(_args(), progress, lambda: next(listings, {"a": 4}), run, alive=lambda: True, metrics=metrics) == 0
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
    assert outcomes == [] and health == [True, True, False, True] and metrics.health()[0]
    assert "FAILED: 1 landing file(s) were refused" in progress.lines
    assert "unhealthy: 2 runs failed in a row; the last: bad declaration" in progress.lines
    assert progress.lines[-2:] == ["SIGTERM: stopping after the current run", "stopped"]
    sample = metrics.registry.get_sample_value
    # a failed run's rows count: it applied what was not refused
    assert sample("sqlserver_cdc_table_changes_applied_total", {"table": "t"}) == 6
    assert sample("sqlserver_cdc_table_rows_quarantined_total", {"table": "t"}) == 2
    assert sample("sqlserver_cdc_table_lag_seconds", {"table": "t"}) == 7
    assert sample("sqlserver_cdc_runs_total", {"status": "failed"}) == 2
    assert sample("sqlserver_cdc_runs_total", {"status": "nothing_to_do"}) == 1
    assert sample("sqlserver_cdc_consecutive_failures", {}) == 0


def test_the_service_ends_with_exit_2_when_spark_is_gone_and_goes_on_when_it_answers():
    def broken(listed):
        raise InfrastructureError("dbt run-operation sqlserver_cdc.begin_run failed - Connection refused")

    with pytest.raises(InfrastructureError, match="the SparkSession is gone .*restart it"):
        serve(_args(), Quiet(), lambda: None, broken, alive=lambda: False)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)


def test_a_second_signal_stops_at_once():
    stop = Stop(Quiet())
    stop(signal.SIGTERM, None)
    assert stop.event.is_set()
    with pytest.raises(SystemExit) as exc:
        stop(signal.SIGINT, None)
    assert exc.value.code == 0


def test_metrics_and_health_are_served_over_http_on_the_loopback():
    m = Metrics(max_failures=1)
    server = m.serve_http("127.0.0.1", 0)
    try:
        base = f"http://127.0.0.1:{server.server_port}"
        m.record("succeeded", 1.5, [{"tracked_table": "orders", "changes_applied": 10, "rows_landed": 12, "quarantined": 0,
                                     "lag_seconds": 0, "headroom_seconds": 86400}])
        text = urllib.request.urlopen(base + "/metrics").read().decode()
        assert 'sqlserver_cdc_table_retention_headroom_seconds{table="orders"} 86400.0' in text
        assert 'sqlserver_cdc_runs_total{status="succeeded"} 1.0' in text
        assert "sqlserver_cdc_run_duration_seconds_count 1.0" in text
        assert urllib.request.urlopen(base + "/healthz").read() == b"ok\n"
        m.failed("failed", 0.2, "REFUSED x.csv")
        with pytest.raises(urllib.error.HTTPError) as exc:
            urllib.request.urlopen(base + "/healthz")
        assert exc.value.code == 503 and b"1 runs failed in a row; the last: REFUSED x.csv" in exc.value.read()
    finally:
        server.shutdown()
