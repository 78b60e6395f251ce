"""Kafka sources against a real broker (cdc_tooling/kafka_broker.py: Apache Kafka in KRaft mode on
127.0.0.1, started per test): the demo's CES events (split, duplicated, shuffled over three
partitions) and Debezium records (snapshot, tombstones, replays) produced in batches, one while a
run reads, by runner processes reading through the SASL listener, one run killed as it lands and the broker
restarted once, build the marts the same events build from files, with every offset landed
exactly once and the password nowhere in outputs, logs, artifacts, ledger or warehouse; records
deleted by retention before they are read stop their source with the missing range until the
gap is accepted, and a partition added later is read from its start; bad declarations are
refused before Spark starts."""

from __future__ import annotations

import io
import json
import os
import uuid
from pathlib import Path

import pytest
import yaml
from kafka import TopicPartition
from kafka.admin import KafkaAdminClient, NewPartitions

from cdc_simulator.demo_data import DemoHistory
from cdc_simulator.kafka_writer import produce
from cdc_tooling.kafka_broker import Broker, down, up
from runner.errors import PipelineFailed, UsageError
from runner.run.report import Progress
from runner.sources import kafka
from tests.conftest import Pipeline, copy_project, free_ports
from tests.scenarios import Warehouse

TABLE_COLUMNS = {"employees": ["Id", "FirstName", "LastName", "SignupDate"],
                 "products": ["product_id", "product_name", "price", "launched_on", "in_stock"]}
CURRENT = ["commit_lsn", "commit_time", "operation", "is_deleted"]
HISTORY = ["valid_from_lsn", "valid_to_lsn", "valid_from", "valid_to", "is_current", "operation", "is_deleted"]



@pytest.fixture
def broker(tmp_path_factory, monkeypatch):
    """A fresh broker (its own folder and ports, outside the test's tmp_path, which is searched
    for the password), with user cdc's password in the environment."""
    password = "pw-" + uuid.uuid4().hex
    monkeypatch.setenv("SQLSERVER_CDC_KAFKA_PASSWORD", password)
    b = Broker(tmp_path_factory.mktemp("broker"), *free_ports(3))
    up(b)
    try:
        yield b
    finally:
        down(b)


def _project(tmp_path: Path, sources: dict, drop: tuple[str, ...]) -> Path:
    project = copy_project(tmp_path / "project", {}, drop=drop)
    config = yaml.safe_load((project / "dbt_project.yml").read_text())
    config["vars"]["cdc_kafka_sources"] = sources
    (project / "dbt_project.yml").write_text(yaml.safe_dump(config, sort_keys=False))
    return project


def _sasl(channel: str, **topics) -> dict:
    return {"channel": channel, "bootstrap_servers_env": "TEST_KAFKA_BOOTSTRAP", **topics,
            "options": {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN"},
            "secret_options": {"sasl.jaas.config": "TEST_KAFKA_JAAS"}}


def _end_offsets(spark, broker: Broker, topics: list[str]) -> dict[tuple[str, int], int]:
    source = kafka.parse_sources({"probe": {"channel": "ces", "bootstrap_servers": broker.bootstrap, "topics": topics}})[0]
    consumer = kafka._Consumer(spark, source, source.client_options())
    try:
        return consumer.offsets(consumer.partitions(source))[1]
    finally:
        consumer.close()


def _mart(rows: list[dict], columns: list[str]) -> list[tuple]:
    return sorted((tuple(r[c] for c in columns) for r in rows), key=repr)


@pytest.mark.service
@pytest.mark.processes
def test_kafka_runs_killed_and_across_a_broker_restart_build_the_marts_files_build(spark, tmp_path, broker,
                                                                                   monkeypatch):
    password = os.environ["SQLSERVER_CDC_KAFKA_PASSWORD"]
    monkeypatch.setenv("TEST_KAFKA_BOOTSTRAP", broker.sasl_bootstrap)
    monkeypatch.setenv("TEST_KAFKA_JAAS", 'org.apache.kafka.common.security.plain.PlainLoginModule required '
                                          f'username="cdc" password="{password}";')
    project = _project(tmp_path, {"hub": _sasl("ces", topics=["employees_hub"]),
                                  "shop": _sasl("debezium", topic_pattern=r"server1\.ShopDb\..*")},
                       drop=("customers", "order_lines"))
    (tmp_path / "landing").mkdir()
    wh = Warehouse(spark, tmp_path / "state", project, tmp_path / "landing")
    produced = DemoHistory(spark, project, 150, 3, seed=19, kafka=broker.bootstrap)
    outputs = []

    # the next batch is produced while the first run builds, after it read up to the ends it found
    produced.write(0, wh.landing)
    run = wh.start()
    lines = []
    for line in run.stdout:
        lines.append(line)
        if "Kafka source shop:" in line:
            break
    produced.write(1, wh.landing)
    outputs.append("".join(lines) + run.communicate(timeout=600)[0])
    assert run.returncode == 0, outputs[-1][-3000:]
    assert "dbt build" in outputs[-1]
    assert "Kafka source hub:" in outputs[-1] and "Kafka source shop:" in outputs[-1], outputs[-1][-2000:]

    # killed as it lands its Kafka records (data files written; the commit before or after)
    files = wh.data_files("landed_rows")
    outputs.append(wh.kill_when(lambda: wh.data_files("landed_rows") > files, "Kafka landing"))
    assert "dbt build" not in outputs[-1]

    # the broker restarts; more records arrive after it
    down(broker)
    up(broker)
    produced.write(2, wh.landing)
    outputs.append(wh.run())

    # every offset produced landed exactly once, and the stored offsets are the partitions' ends
    topics = ["employees_hub", "server1.ShopDb.dbo.products"]
    ends = _end_offsets(spark, broker, topics)
    assert len(ends) == 6 and all(end > 0 for end in ends.values())
    landed = spark.sql(f"""
        select entity as topic, cast(coalesce(row_values['kafka.partition'], row_values['partition']) as int) as p,
               cast(coalesce(row_values['kafka.offset'], row_values['offset']) as bigint) as o, count(*) as n
        from delta.`{wh.path('landed_rows')}` where landing_kind in ('ces', 'debezium') group by 1, 2, 3""").collect()
    assert all(r.n == 1 for r in landed), "a Kafka record landed twice"
    assert {(r.topic, r.p, r.o) for r in landed} == {(t, p, o) for (t, p), end in ends.items() for o in range(end)}
    stored = spark.sql(f"""
        select row_values['topic'] as topic, cast(row_values['partition'] as int) as p,
               max(cast(row_values['to_offset'] as bigint)) as o
        from delta.`{wh.path('landed_rows')}` where landing_kind = 'kafka_offsets' group by 1, 2""").collect()
    assert {(r.topic, r.p): r.o for r in stored} == ends
    # replaced by each landing, not appended: one offsets row per partition
    assert spark.sql(f"select count(*) as n from delta.`{wh.path('landed_rows')}` "
                     "where landing_kind = 'kafka_offsets'").collect()[0].n == len(ends)
    headers = spark.sql(f"select row_values['kafka.timestamp'] as ts from delta.`{wh.path('landed_rows')}` "
                        "where landing_kind = 'ces' limit 1").collect()
    assert headers[0].ts.endswith("Z")

    # the same events from files build the same marts
    files = DemoHistory(spark, project, 150, 3, seed=19)
    twin = Pipeline(spark, "t_" + uuid.uuid4().hex[:8], tmp_path / "files", project_dir=project)
    twin.landing.mkdir()
    for i in range(3):
        files.write(i, twin.landing)
    twin.run(kafka_sources=[])
    for table, columns in TABLE_COLUMNS.items():
        for mart, extra in (("current", CURRENT), ("history", HISTORY)):
            from_kafka = _mart(wh.rows(f"{table}_{mart}"), columns + extra)
            from_files = _mart(twin.rows(f"select * from {{s}}.{table}_{mart}"), columns + extra)
            assert from_kafka == from_files, f"{table}_{mart} differs between Kafka and file landing"
            assert len(from_kafka) > 20
    assert not twin.rows("select * from {s}.cdc_quarantine")

    # the secret never left the environment: runner output, logs, dbt artifacts, ledger, warehouse
    assert password not in "".join(outputs)
    assert password not in json.dumps(wh.rows("cdc_runs"), default=str)
    for path in [*project.rglob("*"), *wh.state.rglob("*")]:
        if path.is_file():
            assert password.encode() not in path.read_bytes(), f"the password is in {path}"


@pytest.mark.service
def test_records_deleted_by_retention_stop_their_source_until_the_gap_is_accepted(spark, tmp_path, broker):
    project = _project(tmp_path, {"hub": {"channel": "ces", "bootstrap_servers": broker.bootstrap,
                                          "topics": ["employees_hub"]}},
                       drop=("customers", "order_lines", "products"))
    produced = DemoHistory(spark, project, 60, 2, seed=5, kafka=broker.bootstrap)
    # fed by Kafka alone: no landing folder at all
    pipeline = Pipeline(spark, "t_" + uuid.uuid4().hex[:8], tmp_path / "no_landing", project_dir=project)
    produced.write(0, pipeline.landing)
    pipeline.run()
    stored = _end_offsets(spark, broker, ["employees_hub"])

    # the next records are deleted by retention (the log start moves to the end) before a run
    produced.write(1, pipeline.landing)
    ends = _end_offsets(spark, broker, ["employees_hub"])
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    admin.delete_records({TopicPartition(topic, partition): end for (topic, partition), end in ends.items()})
    gapped = sorted(tp for tp in ends if ends[tp] > stored[tp])
    with pytest.raises(PipelineFailed, match="Kafka partition"):
        pipeline.run()
    refused = pipeline.rows("select refused from {s}.cdc_runs order by run_id desc limit 1")[0]["refused"]
    for topic, partition in gapped:
        expected = (f"Kafka source hub: topic {topic} partition {partition}: offsets {stored[(topic, partition)]}.."
                    f"{ends[(topic, partition)] - 1}")
        assert any(reason.startswith(expected) for reason in refused), refused
    assert all("--accept-kafka-gap hub" in reason and "CES sends no snapshot" in reason for reason in refused)
    raw = pipeline.rows("select count(*) as n from {s}_raw.landed_rows where landing_kind = 'ces'")[0]["n"]

    # accepted (the snapshot in hand): the partitions move to their log start, the range recorded
    pipeline.run(accept_kafka_gap=["hub"])
    skipped = pipeline.rows("select row_values['topic'] as t, cast(row_values['partition'] as int) as p,"
                            " row_values['skipped'] as skipped from {s}_raw.landed_rows"
                            " where landing_kind = 'kafka_offsets' and row_values['skipped'] is not null")
    assert {(r["t"], r["p"]): r["skipped"] for r in skipped} == {
        tp: f"{stored[tp]}..{ends[tp] - 1}" for tp in gapped}
    assert pipeline.rows("select count(*) as n from {s}_raw.landed_rows where landing_kind = 'ces'")[0]["n"] == raw

    # a partition added to the topic is read from its log start (an event delivered again there
    # is a duplicate to staging)
    admin.create_partitions({"employees_hub": NewPartitions(total_count=4)})
    admin.close()
    again = pipeline.rows("select raw_text from {s}_raw.landed_rows where landing_kind = 'ces' limit 2")
    # the resident runner's watch (runner/run/serve.py) sees the new partition and its records
    watch = kafka.EndOffsets(spark, kafka.sources(project))
    before = watch.poll()
    produce(spark, broker.bootstrap, [{"topic": "employees_hub", "partition": 3, "value": r["raw_text"]} for r in again])
    after = watch.poll()
    watch.close()
    new = "hub/employees_hub/3"  # listed once the broker's metadata has it, with nothing in it
    assert {k: v for k, v in before.items() if k != new} == {f"hub/{t}/{p}": end for (t, p), end in ends.items()}
    assert before.get(new, 0) == 0 and after == {**before, new: 2}
    printed = io.StringIO()
    pipeline.run(progress=Progress(printed))
    assert "Kafka source hub: new partition employees_hub/3: read from its log start 0" in printed.getvalue()
    # the stored offsets are where each partition is read from: nothing from the three others
    assert "Kafka source hub: 2 records from 1 of 4 partitions" in printed.getvalue()
    assert pipeline.rows("select count(*) as n from {s}_raw.landed_rows where landing_kind = 'ces'"
                         " and _source_file = 'kafka:employees_hub/3'")[0]["n"] == 2


@pytest.mark.parametrize(("spec", "message"), [
    ({"channel": "cdc", "bootstrap_servers": "h:1", "topics": ["t"]}, "channel: Input should be 'ces' or 'debezium'"),
    ({"channel": "ces", "topics": ["t"]}, "give bootstrap_servers or bootstrap_servers_env"),
    ({"channel": "ces", "bootstrap_servers": "h:1"}, "give topics (a list) or topic_pattern"),
    ({"channel": "ces", "bootstrap_servers": "h:1", "topic_pattern": "("}, "is not a regular expression"),
    ({"channel": "ces", "bootstrap_servers": "h:1", "topics": ["t"], "starting_offsets": "now"},
     "starting_offsets: Input should be 'earliest' or 'latest'"),
    ({"channel": "ces", "bootstrap_servers": "h:1", "topics": ["t"],
      "options": {"sasl.jaas.config": "PlainLoginModule required password=\"x\";"}}, "holds a secret: move it"),
    ({"channel": "ces", "bootstrap_servers": "h:1", "topics": ["t"], "options": {"ssl.key.password": "x"}},
     "holds a secret"),
    ({"channel": "ces", "bootstrap_servers": "h:1", "topics": ["t"], "options": {"group.id": "g"}},
     "set by the runner"),
    ({"channel": "ces", "bootstrap_servers": "h:1", "topics": ["t"],
      "secret_options": {"sasl.jaas.config": "org.apache.kafka...PlainLoginModule"}}, "must name an environment variable"),
    ({"channel": "ces", "bootstrap_servers": "h:1", "topics": ["t"], "tpoics": ["t"]}, "unknown field(s) tpoics"),
])
def test_kafka_source_declarations_are_checked(spec, message):
    with pytest.raises(UsageError, match=message.replace("(", r"\(").replace(")", r"\)")):
        kafka.parse_sources({"hub": spec})


def test_a_topic_belongs_to_one_source_and_secrets_come_from_the_environment(monkeypatch):
    with pytest.raises(UsageError, match="both read topic t"):
        kafka.parse_sources({"a": {"channel": "ces", "bootstrap_servers": "h:1", "topics": ["t"]},
                             "b": {"channel": "debezium", "bootstrap_servers": "h:1", "topics": ["t"]}})
    source = kafka.parse_sources({"a": {"channel": "ces", "bootstrap_servers_env": "HUB_SERVERS", "topics": ["t"],
                                        "secret_options": {"sasl.jaas.config": "HUB_JAAS"}}})[0]
    monkeypatch.delenv("HUB_SERVERS", raising=False)
    with pytest.raises(UsageError, match="environment variable HUB_SERVERS"):
        source.client_options()
    monkeypatch.setenv("HUB_SERVERS", "h:1")
    monkeypatch.delenv("HUB_JAAS", raising=False)
    with pytest.raises(UsageError, match=r"environment variable HUB_JAAS \(secret option sasl.jaas.config\)"):
        source.client_options()
    monkeypatch.setenv("HUB_JAAS", "s3cret")
    assert source.client_options() == {"bootstrap.servers": "h:1", "sasl.jaas.config": "s3cret"}


def _plan(starting="earliest", started=True, stored=None, log_start=None, end=None, accept=False):
    source = kafka.parse_sources({"hub": {"channel": "debezium", "bootstrap_servers": "h:1", "topics": ["t"],
                                         "starting_offsets": starting}})[0]
    return kafka.plan(source, started, stored or {}, log_start or {}, end or {}, accept)


def test_each_partition_starts_where_its_stored_offset_says():
    t0, t1 = ("t", 0), ("t", 1)
    first = _plan(started=False, log_start={t0: 5, t1: 0}, end={t0: 9, t1: 3})
    assert [(p.start, p.end) for p in first.partitions] == [(5, 9), (0, 3)] and not first.stopped
    latest = _plan("latest", started=False, log_start={t0: 5, t1: 0}, end={t0: 9, t1: 3})
    assert [(p.start, p.end) for p in latest.partitions] == [(9, 9), (3, 3)]
    # a partition seen for the first time after the first run starts at its log start, even with latest
    grown = _plan("latest", stored={t0: 7}, log_start={t0: 5, t1: 2}, end={t0: 9, t1: 4})
    assert [(p.start, p.new) for p in grown.partitions] == [(7, False), (2, True)]
    assert grown.notes == ["new partition t/1: read from its log start 2"]
    # below the log start: stopped, naming the range; accepted: read from the log start, range kept
    gap = _plan(stored={t0: 3, t1: 1}, log_start={t0: 5, t1: 0}, end={t0: 9, t1: 3})
    assert len(gap.stopped) == 1 and gap.stopped[0].startswith(
        "Kafka source hub: topic t partition 0: offsets 3..4 (2 records) were deleted by retention")
    assert "ad hoc blocking snapshot" in gap.stopped[0] and "--accept-kafka-gap hub" in gap.stopped[0]
    accepted = _plan(stored={t0: 3, t1: 1}, log_start={t0: 5, t1: 0}, end={t0: 9, t1: 3}, accept=True)
    assert not accepted.stopped and [(p.start, p.skipped) for p in accepted.partitions] == [(5, (3, 4 + 1)), (1, None)]
    # beyond the end: the topic was recreated
    recreated = _plan(stored={t0: 50}, log_start={t0: 0}, end={t0: 9})
    assert "beyond the partition's end 9: the topic was deleted and recreated" in recreated.stopped[0]
    reset = _plan(stored={t0: 50}, log_start={t0: 0}, end={t0: 9}, accept=True)
    assert not reset.stopped and (reset.partitions[0].start, reset.partitions[0].reset_from) == (0, 50)
    # a stored partition Kafka no longer has is reported, not read
    gone = _plan(stored={t0: 3, t1: 1}, log_start={t0: 0}, end={t0: 3})
    assert gone.notes == ["partition t/1 (stored offset 1) no longer exists in Kafka"]


def test_the_test_broker_never_gets_a_cluster_id_its_storage_tool_reads_as_an_option(monkeypatch):
    """A UUID whose URL-safe base64 starts with '-' (one in 64) made `kafka-storage format -t -...`
    fail; such an id is drawn again."""
    from cdc_tooling import kafka_broker

    drawn = iter([uuid.UUID(bytes=b"\xf8" + bytes(15)), uuid.UUID(bytes=bytes(16))])
    monkeypatch.setattr(kafka_broker.uuid, "uuid4", lambda: next(drawn))
    assert kafka_broker._cluster_id() == "AAAAAAAAAAAAAAAAAAAAAA"
