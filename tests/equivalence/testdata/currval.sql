-- currval before and after nextval, for the default sequence and named
-- ones, whichever path issued the value (a call, a column default, a
-- per-row call, INSERT ... SELECT).
\set VERBOSITY verbose
\set SHOW_CONTEXT never
CREATE SEQUENCE cs;
CREATE SEQUENCE cs_other;
SELECT snowflake.currval();
SELECT snowflake.currval('cs');
SELECT snowflake.currval('public.cs'::regclass);
SELECT snowflake.nextval('cs') AS v \gset
SELECT snowflake.currval('cs') = :v AS same;
SELECT snowflake.currval('cs') = :v AS still_same;
SELECT snowflake.currval('cs_other');
SELECT snowflake.currval();
-- two calls in one statement: currval is the later one
SELECT snowflake.nextval('cs') AS a, snowflake.nextval('cs') AS b \gset
SELECT :b > :a AS increasing, snowflake.currval('cs') = :b AS currval_is_b;
-- nextval and currval in one statement
SELECT snowflake.nextval('cs_other') = snowflake.currval('cs_other') AS same_statement;
-- the default sequence
SELECT snowflake.nextval() AS d \gset
SELECT snowflake.currval() = :d AS default_seq, snowflake.currval('snowflake.id_seq') = :d AS named;
-- a column default
CREATE TABLE ct (id bigint PRIMARY KEY DEFAULT snowflake.nextval('cs'), v text);
INSERT INTO ct (v) VALUES ('a') RETURNING id AS r \gset
SELECT snowflake.currval('cs') = :r AS after_default;
INSERT INTO ct (v) VALUES ('b'), ('c');
SELECT snowflake.currval('cs') = (SELECT max(id) FROM ct) AS after_many;
-- per row and INSERT ... SELECT (the shim)
SELECT count(*) FROM (SELECT snowflake.nextval('cs') FROM generate_series(1, 5)) s;
SELECT snowflake.currval('cs') > (SELECT max(id) FROM ct) AS after_per_row;
INSERT INTO ct (v) SELECT 'sel' || g FROM generate_series(1, 3) g;
SELECT snowflake.currval('cs') = (SELECT max(id) FROM ct) AS after_insert_select;
-- a value issued by the fast path, then currval in a per-row context
SELECT snowflake.nextval('cs') AS f \gset
SELECT snowflake.currval('cs') = :f AS top_level_currval;
SELECT bool_and(snowflake.currval('cs') = :f) AS per_row_currval FROM generate_series(1, 3);
SELECT snowflake.currval('cs') = :f AS currval_from_table FROM (VALUES (1)) v(x);
-- errors: not a sequence, does not exist, NULL
CREATE TABLE not_a_seq (x int);
SELECT snowflake.currval('not_a_seq');
SELECT snowflake.currval('no_such_seq');
SELECT snowflake.nextval('no_such_seq');
SELECT   snowflake.nextval('public.no_such_seq'::regclass);
SELECT snowflake.currval(NULL);
-- a sequence dropped and created again under the same name
DROP TABLE ct;
DROP SEQUENCE cs;
CREATE SEQUENCE cs;
SELECT snowflake.currval('cs');
SELECT snowflake.nextval('cs') IS NOT NULL AS issued;
SELECT snowflake.currval('cs') IS NOT NULL AS defined;
-- DISCARD ALL forgets currval values (as for built-in sequences)
SELECT nextval('cs_other') > 0 AS builtin;
DISCARD ALL;
SELECT currval('cs_other');
SELECT snowflake.currval('cs');
