SELECT snowflake.nextval() UNION ALL SELECT snowflake.nextval('s') UNION SELECT snowflake.nextval() FROM generate_series(1,3) ORDER BY 1
