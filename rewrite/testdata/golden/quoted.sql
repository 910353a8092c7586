SELECT "snowflake"."nextval"('"My Seq"'), snowflake.nextval(E'app.\"x\"'), snowflake.nextval(' "a""b" . c '); SELECT "Snowflake".nextval()
