-- A typical psql session through snowflake-proxy started with --node 7, on a
-- stock PostgreSQL without extension files.
\set VERBOSITY verbose
\set SHOW_CONTEXT never
SET TimeZone = 'UTC';
SET DateStyle = 'ISO, MDY';
CREATE EXTENSION snowflake;
CREATE EXTENSION IF NOT EXISTS snowflake;
SELECT nspname FROM pg_namespace WHERE nspname = 'snowflake';
-- direct calls
SELECT snowflake.nextval();
SELECT snowflake.nextval() AS id, snowflake.get_node(snowflake.nextval()) AS node;
SELECT snowflake.get_node(snowflake.nextval());
SELECT snowflake.currval() = snowflake.currval() AS currval_stable;
-- \gset: keep an ID in a psql variable
SELECT snowflake.nextval() AS first_id \gset
\echo first id: :first_id
SELECT snowflake.currval() = :first_id AS currval_is_last_nextval;
SELECT snowflake.get_node(:first_id) AS node,
       snowflake.get_count(:first_id) BETWEEN 0 AND 4095 AS count_in_range,
       snowflake.format(:first_id) - 'ts' - 'count' AS format_without_time;
SELECT to_timestamp(snowflake.get_epoch(:first_id)) = (snowflake.format(:first_id) ->> 'ts')::timestamptz AS ts_consistent;
SELECT snowflake.nextval() > :first_id AS later_is_larger;
-- a known ID: 2024-01-11 18:08:59.845 UTC, node 7, count 42
SELECT snowflake.get_epoch(136169504773271594),
       snowflake.get_node(136169504773271594),
       snowflake.get_count(136169504773271594);
SELECT snowflake.format(136169504773271594);
SELECT to_timestamp(snowflake.get_epoch(136169504773271594));
SET TimeZone = 'America/New_York';
SELECT snowflake.format(136169504773271594);
SET TimeZone = 'UTC';
SELECT snowflake.get_epoch(136169504588693503) AS epoch_keeps_three_decimals,
       snowflake.format(136169504588693503) AS max_node_and_count;
-- per-row calls: ten distinct IDs
SELECT count(*) AS n, count(DISTINCT id) AS distinct_ids, min(snowflake.get_node(id)) AS node
  FROM (SELECT snowflake.nextval() AS id FROM generate_series(1, 10)) s;
-- a named sequence
CREATE SEQUENCE orders_id_seq;
SELECT snowflake.get_node(snowflake.nextval('orders_id_seq'));
SELECT snowflake.currval('orders_id_seq') = snowflake.currval('public.orders_id_seq'::regclass) AS same;
-- a table with a snowflake default
CREATE TABLE orders (
    id bigint PRIMARY KEY DEFAULT snowflake.nextval('orders_id_seq'),
    item text NOT NULL
);
INSERT INTO orders (item) VALUES ('apple') RETURNING snowflake.get_node(id) AS node;
INSERT INTO orders (item) VALUES ('pear'), ('plum') RETURNING id;
INSERT INTO orders (item) SELECT 'fig ' || g FROM generate_series(1, 3) g;
SELECT id AS last_id FROM orders ORDER BY id DESC LIMIT 1 \gset
SELECT snowflake.currval('orders_id_seq') = :last_id AS currval_is_last_default;
SELECT count(*) AS rows, count(DISTINCT id) AS distinct_ids,
       bool_and(snowflake.get_node(id) = 7) AS all_node_7
  FROM orders;
SELECT item, snowflake.format(id) - 'ts' - 'count' AS format FROM orders ORDER BY id;
-- prepared statements at the SQL level
PREPARE next_id AS SELECT snowflake.nextval();
EXECUTE next_id \gset prepared_
EXECUTE next_id;
SELECT snowflake.currval() > :prepared_nextval AS fresh_on_each_execute;
DEALLOCATE next_id;
-- a transaction
BEGIN;
SELECT snowflake.nextval() AS tx_id \gset
INSERT INTO orders (item) VALUES ('in a transaction');
COMMIT;
SELECT snowflake.nextval() > :tx_id AS after_commit;
