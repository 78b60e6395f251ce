{{ sqlserver_cdc.stage_ces_table('employees') }}
