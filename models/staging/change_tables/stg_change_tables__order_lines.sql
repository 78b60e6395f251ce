{{ sqlserver_cdc.stage_change_table('order_lines') }}
