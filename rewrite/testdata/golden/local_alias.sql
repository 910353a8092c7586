SELECT snowflake.nextval() AS a, snowflake.nextval('s') b;
