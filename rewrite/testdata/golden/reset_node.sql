RESET snowflake.node
