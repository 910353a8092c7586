INSERT INTO t (payload) SELECT 'x' FROM generate_series(1, 3)
