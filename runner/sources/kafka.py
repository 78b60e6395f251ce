"""Kafka sources (docs/channels.md "Reading from Kafka and Event Hubs"): CES and Debezium events read
straight from Kafka topics (Event Hubs' Kafka endpoint included) into the raw table.

A source is declared in `dbt_project.yml` (vars `cdc_kafka_sources`, one entry per name): its
channel (ces or debezium), bootstrap servers (or the environment variable holding them), topics
or a topic pattern, consumer options in Kafka's own names, and `secret_options` naming for each
secret option the environment variable that holds it. Secrets live in the environment only:
they are passed to the Kafka clients and nowhere else (not to dbt, the ledger or a message).

Each run, for each source, before the window is fixed (begin_run):
1. lists the source's partitions and their log-start and end offsets, once (the run's end);
2. starts each partition at its stored offset: the `to_offset` of its offsets row in the raw
   table (landing kind `kafka_offsets`, entity = the source); a partition without one (new
   partition or topic) at its log start; a source's first run at its log start or, with
   `starting_offsets: latest`, at its end;
3. stops the source (it lands nothing, the run fails at its end, other sources and the build go
   on) when a stored offset is below the partition's log start, records deleted by retention
   before they were read, naming topic, partition and missing range, or above its end (the
   topic was recreated); `--accept-kafka-gap <source>` moves such partitions to their log start
   once the remedy (a snapshot) is in hand, recording the skipped range;
4. reads every partition's records from its start to its end with Spark's Kafka source in batch
   mode and appends them to the raw table while replacing the source's offsets rows (one per
   partition), in one Delta commit (INSERT ... REPLACE WHERE): a kill at any instant leaves both
   or neither, so no record is lost or landed twice.
A record lands as a file line would: landing kind the channel, entity its topic, raw_text its
value, _source_file `kafka:<topic>/<partition>`; row_values, for CES, the CloudEvent parsed as a
file line is, plus the record's `kafka.key`, `kafka.topic`, `kafka.partition`, `kafka.offset`,
`kafka.timestamp` and `kafka.headers` (JSON text); for Debezium the whole Kafka record (key,
value, topic, partition, offset, timestamp, headers), the form a sink's files have. So staging,
quarantine and marts are unchanged.

The reads run in the runner's own SparkSession (a session target); the offsets come from a
Kafka consumer in the same JVM (Spark's Kafka client), with the same options.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import ValidationError

from runner.errors import InfrastructureError, UsageError
from runner.project.config import KafkaSourceSpec, explain, project_vars

CHANNELS = ("ces", "debezium")
OFFSETS_KIND = "kafka_offsets"
NAME = re.compile(r"^[a-z][a-z0-9_]*$")
TIMEOUT_SECONDS = 60


@dataclass(frozen=True)
class KafkaSource:
    name: str
    channel: str
    bootstrap_servers: str | None = None
    bootstrap_servers_env: str | None = None
    topics: tuple[str, ...] = ()
    topic_pattern: str | None = None
    starting_offsets: str = "earliest"
    options: dict[str, str] = field(default_factory=dict)
    secret_options: dict[str, str] = field(default_factory=dict)  # option -> environment variable

    def client_options(self) -> dict[str, str]:
        """The consumer options with the secrets read from the environment (never stored)."""
        bootstrap = self.bootstrap_servers or os.environ.get(self.bootstrap_servers_env or "", "")
        if not bootstrap:
            raise UsageError(f"Kafka source {self.name}: environment variable {self.bootstrap_servers_env} "
                             "(bootstrap_servers_env) is not set")
        resolved = {"bootstrap.servers": bootstrap, **self.options}
        for option, variable in self.secret_options.items():
            if not os.environ.get(variable):
                raise UsageError(f"Kafka source {self.name}: environment variable {variable} (secret option "
                                 f"{option}) is not set")
            resolved[option] = os.environ[variable]
        return resolved

    def wants(self, topic: str) -> bool:
        if self.topic_pattern is not None:
            return not topic.startswith("__") and re.fullmatch(self.topic_pattern, topic) is not None
        return topic in self.topics


def sources(project_dir: Path) -> list[KafkaSource]:
    """The Kafka sources declared in the project, checked (UsageError names source and field)."""
    declared = project_vars(project_dir).get("cdc_kafka_sources") or {}
    if not isinstance(declared, dict):
        raise UsageError("vars cdc_kafka_sources must map source names to their settings")
    return parse_sources(declared)


def parse_sources(declared: dict) -> list[KafkaSource]:
    found = []
    for name, spec in declared.items():
        found.append(_source(str(name), spec))
    topics: dict[str, str] = {}
    for s in found:
        for topic in s.topics:
            if topic in topics:
                raise UsageError(f"Kafka sources {topics[topic]} and {s.name} both read topic {topic}: each record "
                                 "must land once, so a topic belongs to one source")
            topics[topic] = s.name
    return found


def _source(name: str, spec: object) -> KafkaSource:
    where = f"Kafka source {name}"
    if not NAME.match(name):
        raise UsageError(f"{where}: a source name is lower-case letters, digits and _ (it names its stored offsets)")
    if not isinstance(spec, dict):
        raise UsageError(f"{where}: expected a mapping of settings")
    try:
        checked = KafkaSourceSpec.model_validate(spec)
    except ValidationError as exc:
        raise UsageError(f"{where}: {explain(exc)}") from None
    return KafkaSource(
        name=name, channel=checked.channel, bootstrap_servers=checked.bootstrap_servers,
        bootstrap_servers_env=checked.bootstrap_servers_env, topics=tuple(checked.topics or ()),
        topic_pattern=checked.topic_pattern, starting_offsets=checked.starting_offsets,
        options={k: _text(v) for k, v in checked.options.items()}, secret_options=dict(checked.secret_options))


def _text(value: object) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


@dataclass
class Partition:
    topic: str
    partition: int
    log_start: int
    end: int
    start: int | None = None  # where this run reads from (None: not read)
    new: bool = False
    skipped: tuple[int, int] | None = None  # an accepted gap: [from, to) never read
    reset_from: int | None = None  # an accepted recreated topic: the stored offset left behind


@dataclass
class SourceLanding:
    source: str
    records: int = 0
    partitions: list[Partition] = field(default_factory=list)
    stopped: list[str] = field(default_factory=list)  # retention gaps and offsets beyond the end
    notes: list[str] = field(default_factory=list)


def _java_message(exc: Exception) -> str:
    java = getattr(exc, "java_exception", None)
    text = java.toString() if java is not None else str(exc)
    return text.splitlines()[0] if text else type(exc).__name__


class _Consumer:
    """A Kafka consumer in Spark's JVM (Spark's own Kafka client), for metadata and offsets only."""

    def __init__(self, spark, source: KafkaSource, options: dict[str, str]):
        jvm = spark._jvm
        self.jvm = jvm
        props = jvm.java.util.Properties()
        for key, value in options.items():
            props.setProperty(key, value)
        for key, value in {"key.deserializer": "org.apache.kafka.common.serialization.ByteArrayDeserializer",
                           "value.deserializer": "org.apache.kafka.common.serialization.ByteArrayDeserializer",
                           "allow.auto.create.topics": "false", "enable.auto.commit": "false",
                           "client.id": f"sqlserver_cdc-{source.name}-offsets"}.items():
            props.setProperty(key, value)
        self.timeout = jvm.java.time.Duration.ofSeconds(TIMEOUT_SECONDS)
        self.consumer = jvm.org.apache.kafka.clients.consumer.KafkaConsumer(props)

    def partitions(self, source: KafkaSource) -> list[tuple[str, int]]:
        found = []
        if source.topic_pattern is not None:
            listing = self.consumer.listTopics(self.timeout)
            for topic in sorted(str(t) for t in listing.keySet()):
                if source.wants(topic):
                    found.extend((topic, int(p.partition())) for p in listing.get(topic))
        else:
            listing = self.consumer.listTopics(self.timeout)
            for topic in source.topics:
                if listing.containsKey(topic):
                    found.extend((topic, int(p.partition())) for p in listing.get(topic))
        return sorted(found)

    def offsets(self, partitions: list[tuple[str, int]]) -> tuple[dict, dict]:
        tps = self.jvm.java.util.ArrayList()
        for topic, partition in partitions:
            tps.add(self.jvm.org.apache.kafka.common.TopicPartition(topic, partition))
        begin = self.consumer.beginningOffsets(tps, self.timeout)
        end = self.consumer.endOffsets(tps, self.timeout)

        def as_dict(java_map) -> dict:
            return {(str(tp.topic()), int(tp.partition())): int(java_map.get(tp)) for tp in java_map.keySet()}

        return as_dict(begin), as_dict(end)

    def close(self) -> None:
        self.consumer.close()


class EndOffsets:
    """The resident runner's watch on its Kafka sources (runner/run/serve.py): each poll lists every
    source's partitions and their end offsets with one consumer per source, kept open for the
    process's life, as {"<source>/<topic>/<partition>": end}; None when a source cannot be read (the
    broker down: the scheduled run reports it). New records, a new partition or topic change it."""

    def __init__(self, spark, sources_: list[KafkaSource]):
        self.spark, self.sources, self.consumers = spark, sources_, {}

    def poll(self) -> dict[str, int] | None:
        ends: dict[str, int] = {}
        try:
            for source in self.sources:
                if source.name not in self.consumers:
                    self.consumers[source.name] = _Consumer(self.spark, source, source.client_options())
                consumer = self.consumers[source.name]
                partitions = consumer.partitions(source)
                for (topic, partition), end in sorted((consumer.offsets(partitions)[1] if partitions else {}).items()):
                    ends[f"{source.name}/{topic}/{partition}"] = end
        except Exception:  # noqa: BLE001 - py4j wraps the client's errors; a run reports them with their cause
            self.close()
            return None
        return ends

    def close(self) -> None:
        for consumer in self.consumers.values():
            try:
                consumer.close()
            except Exception:  # noqa: BLE001, S110 - closing a consumer of an unreachable broker
                pass
        self.consumers = {}


def stored_offsets(spark, raw: str, source: str) -> tuple[bool, dict[tuple[str, int], int]]:
    """(started, {(topic, partition): next offset}) from the source's offsets rows in the raw
    table: its own partition of the table, one row per Kafka partition (each landing replaces
    them), so nothing else is read and the read does not grow with the runs."""
    if not spark.catalog.tableExists(raw):
        return False, {}
    rows = spark.sql(
        f"select row_values['topic'] as topic, cast(row_values['partition'] as int) as partition,"
        f" max(cast(row_values['to_offset'] as bigint)) as next_offset from {raw}"
        f" where landing_kind = '{OFFSETS_KIND}' and entity = '{source}' group by 1, 2").collect()
    return bool(rows), {(r.topic, r.partition): r.next_offset for r in rows if r.topic is not None}


def _remedy(source: KafkaSource) -> str:
    if source.channel == "debezium":
        snapshot = ("take a snapshot of the source's tables (an ad hoc blocking snapshot, which reconciles the "
                    "marts: docs/landing.md \"Snapshots\")")
    else:
        snapshot = ("CES sends no snapshot, so the affected marts stay without those changes until rebuilt from a "
                    "source that has them")
    return f"{snapshot}; then run once with --accept-kafka-gap {source.name}"


def plan(source: KafkaSource, started: bool, stored: dict, log_start: dict, end: dict,
         accept_gap: bool) -> SourceLanding:
    """Where each partition starts this run, and the gaps that stop the source."""
    result = SourceLanding(source.name)
    for tp in sorted(end):
        p = Partition(tp[0], tp[1], log_start[tp], end[tp])
        if tp in stored:
            p.start = stored[tp]
        elif started:
            p.start, p.new = p.log_start, True
            result.notes.append(f"new partition {tp[0]}/{tp[1]}: read from its log start {p.log_start}")
        else:
            p.start = p.log_start if source.starting_offsets == "earliest" else p.end
        if p.start < p.log_start:
            if accept_gap:
                p.skipped = (p.start, p.log_start)
                result.notes.append(f"gap accepted: {tp[0]}/{tp[1]} offsets {p.start}..{p.log_start - 1} skipped "
                                    "(deleted by retention before they were read)")
                p.start = p.log_start
            else:
                result.stopped.append(
                    f"Kafka source {source.name}: topic {tp[0]} partition {tp[1]}: offsets {p.start}..{p.log_start - 1} "
                    f"({p.log_start - p.start} records) were deleted by retention before they were read (the "
                    f"partition now starts at {p.log_start}). Those changes are lost to this pipeline: "
                    f"{_remedy(source)}")
        elif p.start > p.end:
            result.stopped.append(
                f"Kafka source {source.name}: topic {tp[0]} partition {tp[1]}: the stored offset {p.start} is beyond "
                f"the partition's end {p.end}: the topic was deleted and recreated. {_remedy(source)}")
            if accept_gap:
                result.stopped.pop()
                p.reset_from, p.start = p.start, p.log_start
                result.notes.append(f"recreated partition accepted: {tp[0]}/{tp[1]} (stored offset {p.reset_from}) "
                                    f"read from its log start {p.log_start}")
        result.partitions.append(p)
    for tp in sorted(set(stored) - set(end)):
        result.notes.append(f"partition {tp[0]}/{tp[1]} (stored offset {stored[tp]}) no longer exists in Kafka")
    return result


def land(spark, sources_: list[KafkaSource], raw: str, batch_id: str, accept_gap: tuple[str, ...] = ()) -> list[SourceLanding]:
    """Lands every source's new records into the raw table (one Delta commit per source)."""
    unknown = sorted(set(accept_gap) - {s.name for s in sources_})
    if unknown:
        raise UsageError(f"--accept-kafka-gap: no Kafka source named {', '.join(unknown)}")
    results = []
    for source in sources_:
        options = source.client_options()
        started, stored = stored_offsets(spark, raw, source.name)
        try:
            consumer = _Consumer(spark, source, options)
            try:
                partitions = consumer.partitions(source)
                log_start, end = consumer.offsets(partitions) if partitions else ({}, {})
            finally:
                consumer.close()
        except Exception as exc:  # py4j wraps the Kafka client's exceptions
            raise InfrastructureError(f"Kafka source {source.name}: could not read the partitions' offsets from "
                                      f"{options['bootstrap.servers']}: {_java_message(exc)}") from exc
        result = plan(source, started, stored, log_start, end, source.name in accept_gap)
        results.append(result)
        if result.stopped:
            continue
        if started and all(p.start == p.end and not p.skipped and p.reset_from is None for p in result.partitions):
            continue  # nothing new: no commit
        result.records = _append(spark, source, options, result, raw, batch_id)
    return results


def _append(spark, source: KafkaSource, options: dict[str, str], result: SourceLanding, raw: str,
            batch_id: str) -> int:
    from pyspark.sql import functions as F

    reading = [p for p in result.partitions if p.end > p.start]
    frames = []
    if reading:
        assign, starting, ending = {}, {}, {}
        for p in reading:
            assign.setdefault(p.topic, []).append(p.partition)
            starting.setdefault(p.topic, {})[str(p.partition)] = p.start
            ending.setdefault(p.topic, {})[str(p.partition)] = p.end
        reader = spark.read.format("kafka")
        for key, value in options.items():
            reader = reader.option(f"kafka.{key}", value)
        records = (reader.option("assign", json.dumps(assign)).option("startingOffsets", json.dumps(starting))
                   .option("endingOffsets", json.dumps(ending)).option("includeHeaders", "true")
                   .option("failOnDataLoss", "true").load())
        metadata = [
            ("key", F.col("key").cast("string")), ("topic", F.col("topic")),
            ("partition", F.col("partition").cast("string")), ("offset", F.col("offset").cast("string")),
            ("timestamp", F.date_format("timestamp", "yyyy-MM-dd'T'HH:mm:ss.SSS'Z'")),
            ("headers", F.expr("case when size(headers) > 0 then to_json(transform(headers, "
                               "h -> named_struct('key', h.key, 'value', cast(h.value as string)))) end"))]
        if source.channel == "debezium":
            # a whole Kafka record, as a sink writes it with its metadata: staging reads its value
            row_values = F.create_map(*[c for name, value in [("value", F.col("value").cast("string")), *metadata]
                                        for c in (F.lit(name), value)])
        else:
            # the CloudEvent as a file line lands (the same parse), its record's metadata beside it
            # under `kafka.` names, which no CloudEvents attribute can have (a-z and 0-9 only)
            event = F.expr("map_filter(from_json(cast(value as string), 'map<string,string>'), "
                           "(k, v) -> not startswith(k, 'kafka.'))")
            row_values = F.map_concat(event, F.create_map(*[c for name, value in metadata
                                                             for c in (F.lit("kafka." + name), value)]))
        frames.append(records.select(
            row_values.alias("row_values"),
            F.col("value").cast("string").alias("raw_text"),
            F.concat(F.lit("kafka:"), F.col("topic"), F.lit("/"), F.col("partition").cast("string")).alias("_source_file"),
            F.lit(None).cast("bigint").alias("_source_size"),
            F.lit(None).cast("bigint").alias("_source_modified_ms"),
            F.lit(batch_id).alias("_batch_id"),
            F.current_timestamp().alias("_ingested_at"),
            F.lit(source.channel).alias("landing_kind"),
            F.col("topic").alias("entity"),
            # an event names its own database (runner/sources/landing.py: a file's folder names it)
            F.lit(None).cast("string").alias("source_database")))
    offsets = [{"source": source.name, "topic": p.topic, "partition": str(p.partition), "from_offset": str(p.start),
                "to_offset": str(p.end), "log_start_offset": str(p.log_start),
                **({"skipped": f"{p.skipped[0]}..{p.skipped[1] - 1}"} if p.skipped else {}),
                **({"reset_from": str(p.reset_from)} if p.reset_from is not None else {})}
               for p in result.partitions]
    if not offsets:  # a first run that found no partition yet: the source has started all the same
        offsets = [{"source": source.name, "topic": None, "partition": None}]
    marker = spark.createDataFrame(
        [(o, f"kafka:{o['topic']}/{o['partition']}" if o["topic"] else None) for o in offsets],
        "row_values map<string, string>, _source_file string")
    frames.append(marker.select(
        "row_values", F.lit(None).cast("string").alias("raw_text"), "_source_file",
        F.lit(None).cast("bigint").alias("_source_size"), F.lit(None).cast("bigint").alias("_source_modified_ms"),
        F.lit(batch_id).alias("_batch_id"), F.current_timestamp().alias("_ingested_at"),
        F.lit(OFFSETS_KIND).alias("landing_kind"), F.lit(source.name).alias("entity"),
        F.lit(None).cast("string").alias("source_database")))
    combined = frames[0] if len(frames) == 1 else frames[0].unionByName(frames[1])
    # One Delta commit appends the records and replaces the source's offsets rows, so the stored
    # offsets stay one row per partition however many runs there were. The secrets are in the
    # view's plan, never in SQL text; Delta's check that every written row matches REPLACE WHERE
    # is off for this write (the records belong to other partitions of the table, by design).
    settings = {"spark.sql.redaction.options.regex": "(?i)url|jaas|password|secret|token",
                "spark.databricks.delta.replaceWhere.constraintCheck.enabled": "false"}
    previous = {key: spark.conf.get(key, None) for key in settings}
    view = f"sqlserver_cdc_kafka_{source.name}"
    combined.createOrReplaceTempView(view)
    try:
        for key, value in settings.items():
            spark.conf.set(key, value)
        spark.sql(f"insert into {raw} replace where landing_kind = '{OFFSETS_KIND}' and entity = '{source.name}' "
                  f"select * from {view}")
    except Exception as exc:  # py4j wraps Spark's and the Kafka client's exceptions
        raise InfrastructureError(f"Kafka source {source.name}: reading or landing its records failed: "
                                  f"{_java_message(exc)}") from exc
    finally:
        spark.catalog.dropTempView(view)
        for key, value in previous.items():
            if value is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, value)
    # the records landed, from the commit's own metrics (transaction markers take offsets too)
    metrics = spark.sql(f"describe history {raw} limit 1").collect()[0]["operationMetrics"]
    return int(metrics.get("numOutputRows", 0)) - len(offsets)
