set Snowflake.Node = 2.5
