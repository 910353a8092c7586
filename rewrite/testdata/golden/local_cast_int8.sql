SELECT CAST(snowflake.nextval() AS pg_catalog.int8)::int8
