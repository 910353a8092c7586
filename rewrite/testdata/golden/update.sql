UPDATE t SET id = snowflake.nextval() WHERE id = $1
