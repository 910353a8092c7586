SELECT snowflake.nextval('s'), snowflake.currval('s')
