INSERT INTO t (x) VALUES ((1)), ((2)::int)
