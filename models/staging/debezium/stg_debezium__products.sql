{{ sqlserver_cdc.stage_debezium_table('products') }}
