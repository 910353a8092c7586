-- Tables whose id defaults to snowflake.nextval(): one and many rows,
-- RETURNING, the DEFAULT keyword, DEFAULT VALUES, ON CONFLICT, WITH,
-- INSERT ... SELECT, COPY, PREPARE/EXECUTE. IDs are masked; what is shown
-- is what must hold: node bits, uniqueness, order, which sequence was used.
\set VERBOSITY verbose
\set SHOW_CONTEXT never
CREATE TABLE t (id bigint PRIMARY KEY DEFAULT snowflake.nextval(), ord serial, v text);
CREATE SEQUENCE t2_id_seq;
CREATE TABLE t2 (id bigint PRIMARY KEY DEFAULT snowflake.nextval('public.t2_id_seq'::regclass), v text NOT NULL DEFAULT 'x');
-- one row
INSERT INTO t (v) VALUES ('one');
INSERT INTO t (v) VALUES ('one returning') RETURNING id, v, snowflake.get_node(id) AS node;
SELECT snowflake.currval() = max(id) AS currval_is_last FROM t;
-- many rows: increasing in row order
INSERT INTO t (v) VALUES ('m1'), ('m2'), ('m3'), ('m4') RETURNING id, ord, v;
-- the DEFAULT keyword, alone and mixed with explicit ids
INSERT INTO t (id, v) VALUES (DEFAULT, 'default kw') RETURNING id, v;
INSERT INTO t (id, v) VALUES (DEFAULT, 'd1'), (42, 'explicit'), (DEFAULT, 'd2') RETURNING id, v;
-- DEFAULT VALUES
INSERT INTO t DEFAULT VALUES RETURNING id, v;
INSERT INTO t2 DEFAULT VALUES RETURNING id, v;
-- all columns named, without a column list
INSERT INTO t2 VALUES (DEFAULT, 'no column list') RETURNING id, v;
-- ON CONFLICT: no conflict, conflict on an explicit id, DO UPDATE
INSERT INTO t (v) VALUES ('oc1') ON CONFLICT (id) DO NOTHING RETURNING v;
INSERT INTO t (id, v) VALUES (42, 'dup') ON CONFLICT (id) DO NOTHING RETURNING id, v;
INSERT INTO t (id, v) VALUES (42, 'dup') ON CONFLICT (id) DO UPDATE SET v = 'updated ' || EXCLUDED.v RETURNING id, v;
INSERT INTO t (id, v) VALUES (42, 'dup');
-- inside WITH
WITH ins AS (INSERT INTO t (v) VALUES ('cte1'), ('cte2') RETURNING id, v) SELECT v, snowflake.get_node(id) AS node FROM ins ORDER BY v;
-- INSERT ... SELECT and COPY keep the server default
INSERT INTO t (v) SELECT 'sel' || g FROM generate_series(1, 3) g RETURNING v, snowflake.get_node(id) AS node;
COPY t (v) FROM stdin;
copy1
copy2
\.
COPY t2 (v) FROM stdin;
copy t2
\.
-- prepared statements, executed several times: a fresh id each time
PREPARE ins(text) AS INSERT INTO t (v) VALUES ($1) RETURNING v, snowflake.get_node(id) AS node;
EXECUTE ins('p1');
EXECUTE ins('p2');
EXECUTE ins('p3');
DEALLOCATE ins;
PREPARE ins2 AS INSERT INTO t2 DEFAULT VALUES RETURNING v;
EXECUTE ins2;
EXECUTE ins2;
-- what must hold for every row
SELECT count(*) AS rows, count(DISTINCT id) AS distinct_ids,
       count(*) FILTER (WHERE id <> 42 AND snowflake.get_node(id) <> 1) AS wrong_node
  FROM t;
-- ids increase in insertion order (ord is a serial filled in row order)
SELECT count(*) AS out_of_order FROM (
  SELECT id, lag(id) OVER (ORDER BY ord) AS prev FROM t WHERE id <> 42) s
 WHERE id <= prev;
SELECT v FROM t ORDER BY ord;
-- t2 took its ids from t2_id_seq, t from snowflake.id_seq
SELECT snowflake.currval('t2_id_seq') = max(id) AS t2_currval_is_last, count(*) AS rows FROM t2;
SELECT snowflake.currval() = (SELECT max(id) FROM t WHERE id <> 42) AS t_currval_is_last;
-- at or above the last id: the shim's per-row path reserves blocks and
-- the sequence holds the latest block's top (docs/state-model.md, "Blocks")
SELECT last_value >= (SELECT max(id) FROM t2) AS t2_seq_last_value FROM t2_id_seq;
SELECT last_value >= (SELECT max(id) FROM t WHERE id <> 42) AS id_seq_last_value FROM snowflake.id_seq;
-- a table in another schema, a partitioned table
CREATE SCHEMA other;
CREATE TABLE other.o (id bigint PRIMARY KEY DEFAULT snowflake.nextval(), v text);
INSERT INTO other.o (v) VALUES ('o1'), ('o2') RETURNING v, snowflake.get_node(id) AS node;
CREATE TABLE parted (id bigint DEFAULT snowflake.nextval('t2_id_seq'), k int, v text) PARTITION BY LIST (k);
CREATE TABLE parted_1 PARTITION OF parted FOR VALUES IN (1);
CREATE TABLE parted_2 PARTITION OF parted FOR VALUES IN (2);
INSERT INTO parted (k, v) VALUES (1, 'a'), (2, 'b') RETURNING k, v, snowflake.get_node(id) AS node;
INSERT INTO parted_2 (k, v) VALUES (2, 'c') RETURNING k, v, snowflake.get_node(id) AS node;
SELECT snowflake.currval('t2_id_seq') = (SELECT max(id) FROM parted) AS parted_currval_is_last;
SELECT count(DISTINCT id) AS distinct_ids FROM (SELECT id FROM t2 UNION ALL SELECT id FROM parted) s;
-- a default changed away from snowflake is no longer filled by it
ALTER TABLE t2 ALTER COLUMN id SET DEFAULT 7;
INSERT INTO t2 (v) VALUES ('seven') RETURNING id, v;
ALTER TABLE t2 ALTER COLUMN id DROP DEFAULT;
INSERT INTO t2 (v) VALUES ('null id') RETURNING id, v;
ALTER TABLE t2 ALTER COLUMN id SET DEFAULT snowflake.nextval('t2_id_seq');
INSERT INTO t2 (v) VALUES ('back') RETURNING v, snowflake.get_node(id) AS node;
-- a table created in this session is picked up at once
CREATE TABLE late (id bigint PRIMARY KEY DEFAULT snowflake.nextval(), v text);
INSERT INTO late (v) VALUES ('late') RETURNING v, snowflake.get_node(id) AS node;
SELECT snowflake.currval() = (SELECT id FROM late) AS late_currval;
