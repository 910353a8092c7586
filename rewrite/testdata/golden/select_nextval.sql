SELECT snowflake.nextval()
