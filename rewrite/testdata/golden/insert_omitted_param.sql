INSERT INTO orders (payload) VALUES ($1) RETURNING id
