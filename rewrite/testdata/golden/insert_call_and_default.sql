INSERT INTO t (x, id) VALUES (1, snowflake.nextval('s')), (2, DEFAULT)
