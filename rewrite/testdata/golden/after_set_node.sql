SELECT snowflake.nextval(); SET snowflake.node = 2; SELECT snowflake.nextval(); DEALLOCATE x
