-- Debezium SQL Server connector events: every landed line, unwrapped (Kafka record, schema
-- envelope, Avro-JSON unions), de-duplicated (replays), tombstones counted, bad lines quarantined.
-- The logic is the macro debezium_events, which the runner's high-water mark reads too.
{{ sqlserver_cdc.debezium_events(source('cdc_raw', 'landed_rows')) }}
