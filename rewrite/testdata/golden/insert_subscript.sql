INSERT INTO t (a[1], x) VALUES (1, 2)
