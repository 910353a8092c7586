SET snowflake.node TO DEFAULT
