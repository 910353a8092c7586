SET snowflake.node = 'abc'
