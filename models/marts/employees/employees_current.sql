{{ sqlserver_cdc.current_state('employees') }}
