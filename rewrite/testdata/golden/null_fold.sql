SELECT NULL + snowflake.nextval(), snowflake.nextval()
