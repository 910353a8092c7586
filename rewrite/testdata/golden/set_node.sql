SET snowflake.node = 5
