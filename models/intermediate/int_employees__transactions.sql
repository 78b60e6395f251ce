{{ sqlserver_cdc.transactions('employees') }}
