SELECT snowflake.nextval('public.orders_id_seq'::regclass) AS id
