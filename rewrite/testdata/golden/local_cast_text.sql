SELECT snowflake.nextval()::text
