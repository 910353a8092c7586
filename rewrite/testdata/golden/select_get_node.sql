SELECT snowflake.get_node(snowflake.nextval()), snowflake.format(snowflake.currval())
