INSERT INTO public.orders AS o (note, id) VALUES ('a', DEFAULT), ('b', 42), ('c', DEFAULT) ON CONFLICT (id) DO NOTHING RETURNING o.id
