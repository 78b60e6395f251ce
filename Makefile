# Two commands set everything up on a fresh machine with Java 17 and Python 3.10+:
#   make demo   - create .venv, install the runtime packages (not the `dev` extra), fetch the
#                 sessions' jars (Delta Lake, Kafka source, S3A) into .jars/ (once, from Maven
#                 Central) and build the project's Delta log store beside them, generate demo
#                 landing data, run the pipeline, print a summary
#   make test   - create .venv, install the `dev` extra too (pytest, ruff, moto ...), fetch the
#                 tests' jars too (Kafka broker, HDFS mini-cluster), run linters, dbt docs
#                 generate and every test but the service tier (what CI runs)
#   make test-services - the service tier: the tests that start a service of their own (a Spark
#                 cluster, a Kafka broker, HDFS, an S3 server) and the set-up test (a new virtual
#                 environment and a cold first demo), about 50 minutes on two cores
#   make test-all - both
#   make test-fast - the fast tier after an edit: ruff and the tests that start no service and no
#                 runner process and run no multi-run scenario (docs/testing.md "Tiers")
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# the tests' and linters' packages (pytest, hypothesis, ruff, moto, Kafka's client, Spark Connect's
# client): `make demo` does not install them (about a minute less on a fresh machine)
DEV_STAMP := $(VENV)/.installed-dev

.PHONY: demo demo-kafka test test-services test-all test-fast test-jars lint docs bench clean check-java cluster-up cluster-down kafka-up kafka-down hdfs-up hdfs-down

check-java:
	@command -v java >/dev/null 2>&1 || { echo "ERROR: java not found. Spark needs Java 17: install it (e.g. apt-get install openjdk-17-jre-headless) and re-run."; exit 2; }

# The Spark side of the install, from pyproject.toml's own requirements: PySpark and Delta's Python
# package. PySpark is published as a source archive only (455 MB, Spark's jars inside), so pip
# builds a wheel of it on a machine whose pip cache does not hold one; built without compressing
# the jars again it takes 14 s instead of 28 (docs/performance.md "The first run"). Installed
# first, so that the sessions' jars (resolved with its spark-submit) download while pip installs
# the rest.
SPARK_REQUIREMENTS := $(shell sed -nE 's/^ *"((pyspark|delta-spark)[<>=][^"]*)",.*$$/\1/p' pyproject.toml)

$(STAMP): pyproject.toml
	@test "$(words $(SPARK_REQUIREMENTS))" = 2 || { echo "ERROR: pyproject.toml's dependencies should name pyspark and delta-spark, one per line (found: $(SPARK_REQUIREMENTS))"; exit 2; }
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet --config-settings=--build-option=--compression=stored $(foreach r,$(SPARK_REQUIREMENTS),'$(r)')
	@echo "$(PY) -m pip install --quiet -e . (and $(PY) -m runner.spark.jars beside it)"
	@$(PY) -m runner.spark.jars & jars=$$!; $(PY) -m pip install --quiet -e .; installed=$$?; \
		wait $$jars; fetched=$$?; test $$installed = 0 && test $$fetched = 0
	touch $(STAMP)

$(DEV_STAMP): $(STAMP)
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $(DEV_STAMP)

demo: check-java $(STAMP)
	$(PY) -m cdc_tooling demo

lint: $(DEV_STAMP)
	$(PY) -m ruff check runner cdc_simulator cdc_tooling tests
	$(VENV)/bin/sqlfluff lint models

bench: check-java $(DEV_STAMP)
	$(PY) -m cdc_tooling bench $(BENCH_ARGS)

docs: check-java $(STAMP)
	$(VENV)/bin/dbt docs generate --profiles-dir . --project-dir . --quiet

# the jars only the tests use (the Kafka broker's, the HDFS mini-cluster's): fetched once, after
# which this is a check without network
test-jars: $(STAMP)
	$(PY) -m runner.spark.jars --tests

test: check-java $(DEV_STAMP) test-jars lint
	$(PY) -m pytest -m "not service and not setup"

# the tests that start a service of their own and the set-up test (docs/testing.md "Tiers"):
# before a release, and after a change to the targets, Kafka, remote landing or the set-up
test-services: check-java $(DEV_STAMP) test-jars
	$(PY) -m pytest -m "service or setup"

test-all: check-java $(DEV_STAMP) test-jars lint
	$(PY) -m pytest

FAST := not service and not processes and not scenario

test-fast: check-java $(DEV_STAMP) test-jars
	$(PY) -m ruff check runner cdc_simulator cdc_tooling tests
	$(PY) -m pytest -m "$(FAST)"

# A local Spark standalone cluster (master, two workers and one server serving Thrift and Spark
# Connect, on 127.0.0.1) for the `cluster` and `connect` targets (SERVER=none: no server):
# docs/operations.md "Running on a cluster". State and logs in .cluster/.
cluster-up: check-java $(STAMP)
	$(PY) -m cdc_tooling.cluster up $(SERVER)

cluster-down: $(STAMP)
	$(PY) -m cdc_tooling.cluster down

# A local Apache Kafka broker (KRaft, one node, 127.0.0.1:19092 PLAINTEXT, :19093 SASL PLAIN) for
# demo-kafka and trying Kafka sources: docs/channels.md "Reading from Kafka and Event Hubs". Data in .kafka/.
kafka-up: check-java $(STAMP)
	$(PY) -m cdc_tooling.kafka_broker up

kafka-down: $(STAMP)
	$(PY) -m cdc_tooling.kafka_broker down

# A local HDFS (Apache Hadoop's mini-cluster, NameNode on 127.0.0.1:19820) for trying a remote
# landing folder: docs/operations.md "Landing from object storage". Data and log in .hdfs/.
hdfs-up: check-java $(STAMP)
	$(PY) -m cdc_tooling.hdfs up

hdfs-down: $(STAMP)
	$(PY) -m cdc_tooling.hdfs down

# The demo with its CES and Debezium events produced to the local broker and read from there
# (a landing folder of its own: the change-table exports stay files).
demo-kafka: check-java $(STAMP)
	$(PY) -m cdc_tooling demo --kafka 127.0.0.1:$${SQLSERVER_CDC_KAFKA_PORT:-19092} --landing landing-kafka

clean:
	rm -rf target logs .state landing landing-kafka bench/work
