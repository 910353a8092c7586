SELECT snowflake.nextval(CAST('"Orders"."Id_seq"' AS regclass)), snowflake.nextval(pg_catalog.regclass 's')
