-- leading comment
SELECT snowflake.nextval(); /* between */ SELECT 1; SET search_path = app, public;
SELECT snowflake.currval() -- trailing
