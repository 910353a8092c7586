SELECT snowflake.nextval() + $1::int8 * 0
