SELECT * FROM snowflake.currval('s')
