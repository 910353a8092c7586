SET SESSION snowflake.node = 1024
