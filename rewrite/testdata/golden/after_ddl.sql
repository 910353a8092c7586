CREATE SEQUENCE s; SELECT snowflake.nextval('s')
