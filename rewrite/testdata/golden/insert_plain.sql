INSERT INTO orders (payload) VALUES ('x')
