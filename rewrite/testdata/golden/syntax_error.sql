SELECT snowflake.nextval(
