{{ sqlserver_cdc.current_state('order_lines') }}
