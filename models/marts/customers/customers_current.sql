{{ sqlserver_cdc.current_state('customers') }}
