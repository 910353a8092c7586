SET snowflake.node = '$sf$'
