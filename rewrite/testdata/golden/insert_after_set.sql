SET search_path = s; INSERT INTO t (x) VALUES (1)
