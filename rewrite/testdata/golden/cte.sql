WITH x AS (SELECT snowflake.nextval()) SELECT * FROM x
