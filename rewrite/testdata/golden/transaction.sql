BEGIN; SET LOCAL snowflake.node = 3; SELECT snowflake.nextval(); COMMIT
