{{ sqlserver_cdc.transactions('products') }}
