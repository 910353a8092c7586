DROP EXTENSION snowflake, pgcrypto
