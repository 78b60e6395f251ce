{{ sqlserver_cdc.history('order_lines') }}
