SHOW snowflake.node; SHOW search_path; SELECT current_setting('snowflake.node'), current_setting('snowflake.node', true)
