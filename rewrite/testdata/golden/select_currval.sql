select snowflake.currval('orders_id_seq')
