{{ sqlserver_cdc.history('employees') }}
