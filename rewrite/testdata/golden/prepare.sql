PREPARE p AS SELECT snowflake.nextval()
