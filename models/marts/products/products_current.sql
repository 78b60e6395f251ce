{{ sqlserver_cdc.current_state('products') }}
