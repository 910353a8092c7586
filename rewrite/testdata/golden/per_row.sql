SELECT snowflake.nextval() FROM generate_series(1,10)
