SET snowflake.node = 99999999999
