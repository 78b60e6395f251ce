"""The simulated SQL Server and its writers: change-table exports, CES events, Debezium records
and Kafka topics, for the demo, the tests and the benchmark (never imported by the runner)."""
