SELECT (snowflake.nextval())::text, snowflake.nextval()::int8 /* c */, CAST(snowflake.currval() AS bigint), -snowflake.nextval()
