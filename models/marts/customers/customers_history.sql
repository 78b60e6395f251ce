{{ sqlserver_cdc.history('customers') }}
