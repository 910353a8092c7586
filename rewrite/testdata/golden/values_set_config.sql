VALUES (set_config('search_path', 'app', false), snowflake.nextval())
