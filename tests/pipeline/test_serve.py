"""The resident runner (`python -m runner serve`, runner/run/serve.py, runner/run/metrics.py): when
it runs, how it goes on after a failed run and stops on a signal, and what its metrics and health
say, a hung run among them (runner/run/watchdog.py: what a run is doing, its limit, the deadline
that abandons it). The loop is driven here with fake runs and clocks (milliseconds);
tests/pipeline/test_faults.py runs the real service and `run --timeout` in processes whose JVM it
freezes."""

from __future__ import annotations

import signal
import threading
import urllib.error
import urllib.request
from types import SimpleNamespace

import pytest

from runner.errors import InfrastructureError, UsageError
from runner.run import watchdog
from runner.run.cli import _parser, timed_out
from runner.run.metrics import Metrics
from runner.run.serve import Stop, Trigger, serve
from runner.run.watchdog import Activity, Deadline


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
                              "run_limit": None, "stale_after": None, **given})


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
    assert sample("sqlserver_cdc_table_changes_applied_total", {"table": "t", "database": ""}) == 6
    assert sample("sqlserver_cdc_table_rows_quarantined_total", {"table": "t", "database": ""}) == 2
    assert sample("sqlserver_cdc_table_lag_seconds", {"table": "t", "database": ""}) == 7
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
        assert 'sqlserver_cdc_table_retention_headroom_seconds{database="",table="orders"} 86400.0' in text
        assert 'sqlserver_cdc_runs_total{status="succeeded"} 1.0' in text
        assert "sqlserver_cdc_run_duration_seconds_count 1.0" in text
        assert urllib.request.urlopen(base + "/healthz").read() == b"ok\n"
        m.failed("failed", 0.2, "REFUSED x.csv")
        with pytest.raises(urllib.error.HTTPError) as exc:
            urllib.request.urlopen(base + "/healthz")
        assert exc.value.code == 503 and b"1 runs failed in a row; the last: REFUSED x.csv" in exc.value.read()
    finally:
        server.shutdown()


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _node(name: str, started: bool):
    """A dbt NodeStart or NodeFinished event of model `name`, as dbt's callbacks receive it."""
    info = SimpleNamespace(unique_id=f"model.sqlserver_cdc.{name}", node_name=name, resource_type="model")
    return SimpleNamespace(info=SimpleNamespace(name="NodeStart" if started else "NodeFinished"),
                           data=SimpleNamespace(node_info=info))


def test_the_run_limit_is_given_or_a_multiple_of_the_longest_successful_run_with_a_floor():
    assert watchdog.run_limit(120, 500, 10)[0] == 120  # given
    # before a first success: the floor and a minute per declared table (an initial load, a catch-up)
    assert watchdog.run_limit(None, None, 4) == (1140, ("before a first successful run: 900 s and 60 s for each of 4 "
                                                        "declared table(s); --run-limit sets it"))
    assert watchdog.run_limit(None, 60, 4)[0] == 900  # five times 60 s is under the floor
    assert watchdog.run_limit(None, 400, 4) == (2000, "5 x the longest successful run (400 s); --run-limit sets it")
    args = _parser().parse_args(["serve", "--run-limit", "30", "--stale-after", "600", "--timeout", "90"])
    assert (args.run_limit, args.stale_after, args.timeout) == (30, 600, 90)
    with pytest.raises(SystemExit):
        _parser().parse_args(["run", "--timeout", "0"])


def test_a_run_longer_than_its_limit_is_reported_hung_naming_where_it_is_and_recovers_when_it_ends():
    clock = Clock()
    activity = Activity(clock)
    m = Metrics(max_failures=3, every=300, tables=2, activity=activity)
    sample = m.registry.get_sample_value
    m.record("succeeded", 250.0)  # the limit: 5 x 250 s
    assert m.run_limit()[0] == 1250 and sample("sqlserver_cdc_run_limit_seconds", {}) == 1250
    activity.begin()
    activity.step("dbt build of 2 model(s)")
    activity.invoking("dbt build")
    clock.now += 5
    activity.dbt_event(_node("customers_history", True))
    clock.now += 1000
    assert m.health() == (True, "ok") and sample("sqlserver_cdc_run_in_progress_seconds", {}) == 1005
    clock.now += 300
    ok, why = m.health()
    assert not ok and why == ("the run in progress has run 1305 s, over the limit of 1250 s (5 x the longest successful "
                              "run (250 s); --run-limit sets it); it is at dbt build, model customers_history (running "
                              '1300 s), in the step "dbt build of 2 model(s)"')
    assert sample("sqlserver_cdc_healthy", {}) == 0
    activity.dbt_event(_node("customers_history", False))
    activity.invoking(None)
    assert m.hung().endswith('it is at the step "dbt build of 2 model(s)"')
    activity.invoking("dbt run-operation sqlserver_cdc.finish_run")
    clock.now += 2
    assert m.hung().endswith('it is at dbt run-operation sqlserver_cdc.finish_run (running 2 s), in the step "dbt build '
                             'of 2 model(s)"')
    activity.end()  # the run ended: nothing in progress, healthy again
    assert m.health() == (True, "ok") and sample("sqlserver_cdc_run_in_progress_seconds", {}) == 0
    assert sample("sqlserver_cdc_healthy", {}) == 1


def test_no_successful_run_for_the_stale_limit_is_unhealthy():
    m = Metrics(every=300, tables=4)
    m.started -= 1140 + 600 - 5  # the run limit before a first success, and two intervals: not yet
    assert m.health() == (True, "ok")
    m.started -= 10
    ok, why = m.health()
    assert not ok and why.startswith("no run succeeded for 1745 s, over the limit of 1740 s (the run limit and two "
                                     "--every intervals)")
    given = Metrics(stale_after=60, every=300)
    given.started -= 61
    assert given.health()[1].endswith("over the limit of 60 s (--stale-after)")


def test_the_deadline_abandons_a_run_that_has_run_too_long_naming_where_it_was():
    clock = Clock()
    activity, expired = Activity(clock), []
    deadline = Deadline(600, activity, expired.append, poll=0.01).start()
    try:
        activity.begin()
        activity.step("landing new files from /landing (batch b1)")
        activity.invoking("dbt run-operation sqlserver_cdc.begin_run")
        clock.now += 600  # at the limit, not over it
        threading.Event().wait(0.1)
        assert not expired
        clock.now += 1
        for _ in range(500):
            if expired:
                break
            threading.Event().wait(0.01)
    finally:
        deadline.stop()
    assert expired == [('dbt run-operation sqlserver_cdc.begin_run (running 601 s), in the step "landing new files '
                        'from /landing (batch b1)"')]
    assert timed_out(600, expired[0]).startswith("FAILED: the run did not finish within --timeout 600 s; it was at dbt "
                                                 "run-operation sqlserver_cdc.begin_run (running 601 s)")


def test_a_hung_run_makes_healthz_answer_503_and_sigterm_abandons_it_at_once():
    """The service's loop, its run blocked (as in a frozen JVM): /healthz (served from its own
    thread) answers 503 naming the run's node once the run is over its limit; SIGTERM then does not
    wait for the run: it abandons it (the real service kills its JVM and exits 0)."""
    progress, abandoned, answers = Quiet(), [], []
    progress.activity = Activity()
    port = {}

    def hung_run(listed):
        progress.activity.step("dbt build of 1 model(s)")
        progress.activity.invoking("dbt build")
        progress.activity.dbt_event(_node("customers_current", True))
        while True:  # what a run blocked on a frozen JVM does, from the outside
            status, text = _get(port["port"], "/healthz")
            if status == 503:
                answers.append(text)
                signal.raise_signal(signal.SIGTERM)
            threading.Event().wait(0.05)

    def abandon(line, code):
        abandoned.append((line, code))
        raise SystemExit(code)

    metrics = Metrics(run_limit=0.3, activity=progress.activity)
    server = metrics.serve_http("127.0.0.1", 0)
    port["port"] = server.server_port
    try:
        with pytest.raises(SystemExit) as exc:
            serve(_args(run_limit=0.3), progress, lambda: {"a": 1}, hung_run, alive=lambda: True, metrics=metrics,
                  abandon=abandon)
    finally:
        server.shutdown()
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
    assert exc.value.code == 0
    assert answers and answers[0].startswith("the run in progress has run 0 s, over the limit of 0.3 s (--run-limit); it "
                                             "is at dbt build, model customers_current (running 0 s), in the step "
                                             '"dbt build of 1 model(s)"'), answers
    (line, code), = abandoned
    assert code == 0 and line.startswith("SIGTERM: stopping now, abandoning the current run, which is hung (the run in "
                                         "progress has run")
    assert progress.activity.age() is None  # the loop ended its run


def _get(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as answer:
            return answer.status, answer.read().decode().strip()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode().strip()


def test_maintenance_runs_between_runs_and_yields_to_a_run_that_falls_due_after_the_table_in_hand():
    """A pass every --maintain-every seconds, never inside a run; files arriving while it maintains
    a table make it stop after that table: the run starts right after, then the pass goes on."""
    from runner.run.maintain import Facts, Pass
    from runner.run.maintenance import TableState, Task

    events: list[str] = []
    listing = {"a": 1}
    tables = ["t1", "t2", "t3"]
    states = {t: TableState(t, "mart", 5, 50, "m") for t in tables}

    def maintain(yield_to):
        left = [t for t in tables if f"maintained {t}" not in events]
        result = Pass(Facts(states, {}), [Task(t, "mart", compact=True) for t in left])
        for i, t in enumerate(left):
            if yield_to():
                result.left = result.tasks[i:]
                events.append("yielded")
                return result
            events.append(f"maintained {t}")
            result.done.append({"relation": t, "files_after": 1, "bytes_after": 40, "disk_bytes_after": 40,
                                "started_at": "2026-12-01 10:00:00", "seconds": 0.5})
            if t == "t2":
                listing["b"] = 1  # an export arrives while t2 is maintained
        signal.raise_signal(signal.SIGTERM)  # the pass is whole: the service stops after it
        return result

    def run(listed):
        events.append(f"run {sorted(listed)}")
        return "succeeded", [], ""

    metrics = Metrics()
    try:
        serve(_args(every=3600, maintain_every=0.01), Quiet(), lambda: dict(listing), run, alive=lambda: True,
              metrics=metrics, maintain=maintain)
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
    # the first run at start, a pass after --maintain-every that yields once b has arrived, the run
    # of b (after it settled), the rest of the pass
    assert events == ["run ['a']", "maintained t1", "maintained t2", "yielded", "run ['a', 'b']", "maintained t3"]
    sample = metrics.registry.get_sample_value
    assert sample("sqlserver_cdc_maintenance_passes_total", {"status": "yielded"}) == 1
    assert sample("sqlserver_cdc_maintenance_passes_total", {"status": "completed"}) == 1
    assert sample("sqlserver_cdc_table_files", {"relation": "t3"}) == 1
    assert sample("sqlserver_cdc_table_last_maintenance_seconds", {"relation": "t1"}) == 0.5
