SET LOCAL snowflake.node TO '0x10'
