SELECT set_config('search_path', 'app', false)
