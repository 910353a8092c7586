SET snowflake.node = 1, 2
