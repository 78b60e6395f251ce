"""Tooling around the runner: the demo and data generator, the benchmark, a local Spark cluster and
a local Kafka broker (`python -m cdc_tooling`; never imported by the runner)."""
