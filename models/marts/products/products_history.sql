{{ sqlserver_cdc.history('products') }}
