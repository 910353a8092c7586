EXPLAIN ANALYZE SELECT snowflake.nextval()
