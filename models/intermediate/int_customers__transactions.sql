{{ sqlserver_cdc.transactions('customers') }}
