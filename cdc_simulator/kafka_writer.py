"""Records produced to Kafka topics with Spark's Kafka sink: the demo's and the tests' events on
a broker (cdc_tooling/kafka_broker.py starts a local one)."""

from __future__ import annotations


def produce(spark, bootstrap: str, records: list[dict], options: dict[str, str] | None = None) -> None:
    """Produces records ({topic, value, key?, partition?, headers?: {name: text}}) with Spark's
    Kafka sink, in order per partition (a record without a partition goes where the producer's
    partitioner puts it: by key, or spread when it has none). For the demo and the tests."""
    rows = [(r["topic"], r.get("partition"), r.get("key"), r.get("value"),
             [(k, v.encode()) for k, v in (r.get("headers") or {}).items()] or None) for r in records]
    frame = spark.createDataFrame(rows, "topic string, partition int, key string, value string, "
                                        "headers array<struct<key: string, value: binary>>")
    writer = frame.coalesce(1).write.format("kafka").option("kafka.bootstrap.servers", bootstrap)
    for key, value in (options or {}).items():
        writer = writer.option(f"kafka.{key}", value)
    writer.save()
