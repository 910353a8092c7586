VALUES (snowflake.nextval(), 1), (snowflake.nextval() + 1, 2), (abs(snowflake.nextval()), 3)
