{{ sqlserver_cdc.transactions('order_lines') }}
