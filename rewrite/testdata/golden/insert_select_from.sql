INSERT INTO t SELECT snowflake.nextval(), x FROM generate_series(1,10) x
