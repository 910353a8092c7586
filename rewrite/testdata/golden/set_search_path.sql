SET search_path TO app, public
