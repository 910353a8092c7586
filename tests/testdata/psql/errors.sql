-- Errors through snowflake-proxy (--node 7): the extension's messages and
-- SQLSTATEs (VERBOSITY verbose prints the code).
\set VERBOSITY verbose
\set SHOW_CONTEXT never
CREATE EXTENSION snowflake;
CREATE EXTENSION snowflake;
-- currval before any nextval in this session
SELECT snowflake.currval();
CREATE SEQUENCE s;
SELECT snowflake.currval('s');
-- wrong objects
CREATE TABLE not_a_sequence (a int);
SELECT snowflake.nextval('not_a_sequence');
SELECT snowflake.nextval('no_such_sequence');
SELECT snowflake.nextval() FROM generate_series(1, 2) WHERE snowflake.nextval('not_a_sequence') > 0;
-- a failed transaction
BEGIN;
SELECT 1/0;
SELECT snowflake.nextval();
SELECT snowflake.currval('s');
ROLLBACK;
SELECT snowflake.get_node(snowflake.nextval());
-- read-only transactions
BEGIN READ ONLY;
SELECT snowflake.nextval();
ROLLBACK;
BEGIN;
SET TRANSACTION READ ONLY;
SELECT snowflake.nextval('s') FROM generate_series(1, 2);
ROLLBACK;
-- no node: the session may set it to 0 (unset)
SET snowflake.node = 0;
SELECT snowflake.nextval();
SELECT snowflake.nextval('s');
RESET snowflake.node;
SELECT snowflake.get_node(snowflake.nextval('s'));
SET snowflake.node = 1024;
-- a column default depends on the extension
CREATE TABLE t (id bigint DEFAULT snowflake.nextval(), v int);
DROP EXTENSION snowflake;
DROP EXTENSION snowflake CASCADE;
SELECT snowflake.nextval();
INSERT INTO t (v) VALUES (1) RETURNING id;
DROP EXTENSION snowflake;
DROP EXTENSION IF EXISTS snowflake;
CREATE EXTENSION IF NOT EXISTS snowflake;
SELECT snowflake.get_node(snowflake.nextval());
