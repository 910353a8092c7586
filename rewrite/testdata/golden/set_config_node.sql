SELECT set_config('snowflake.node', '5', false), pg_catalog.set_config('Snowflake.Node', '6', true), set_config('search_path', 'x', false)
