SELECT snowflake.nextval(), generate_series(1,3)
