CREATE TABLE t (id bigint PRIMARY KEY DEFAULT snowflake.nextval())
