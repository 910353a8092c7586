SELECT snowflake.nextval() INTO t
