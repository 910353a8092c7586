/* install */ create extension snowflake ; -- done
