INSERT INTO t (id) SELECT snowflake.nextval()
