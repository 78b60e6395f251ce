-- Debezium SQL Server connector events: every landed line, unwrapped (Kafka record, schema
-- envelope, Avro-JSON unions), de-duplicated (replays), tombstones counted, bad lines quarantined.
-- The logic is the macro debezium_events, which the runner's high-water mark reads too.
-- Built only when a tracked table declares channel debezium.
{{ config(enabled=sqlserver_cdc.channel_declared('debezium')) }}
{{ sqlserver_cdc.debezium_events(source('cdc_raw', 'landed_rows')) }}
