SELECT snowflake.nextval('s') FROM generate_series(1, 3); SELECT snowflake.nextval('s')
