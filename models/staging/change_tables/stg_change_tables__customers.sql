{{ sqlserver_cdc.stage_change_table('customers') }}
