-- Privileges, wrong object types and read-only transactions: the server's
-- errors (text and SQLSTATE), whichever path would have issued the ID.
-- roles: eq_nouse eq_user
\set VERBOSITY verbose
\set SHOW_CONTEXT never
CREATE SEQUENCE ps;
CREATE TABLE pt (id bigint PRIMARY KEY DEFAULT snowflake.nextval('ps'), v text);
CREATE TABLE pt_default (id bigint PRIMARY KEY DEFAULT snowflake.nextval(), v text);
-- PostgreSQL 15's default, for older servers
REVOKE CREATE ON SCHEMA public FROM PUBLIC;
CREATE ROLE eq_nouse;
CREATE ROLE eq_user;
GRANT INSERT, SELECT ON pt, pt_default TO eq_nouse, eq_user;
GRANT USAGE ON SEQUENCE ps TO eq_user;
SELECT snowflake.nextval('ps') AS before \gset
-- a role without USAGE on the sequence
SET ROLE eq_nouse;
SELECT current_user;
SELECT snowflake.nextval('ps');
SELECT snowflake.currval('ps');
INSERT INTO pt (v) VALUES ('refused');
INSERT INTO pt (v) VALUES ('refused') RETURNING id;
INSERT INTO pt (v) SELECT 'refused';
-- but an explicit id needs no sequence
INSERT INTO pt (id, v) VALUES (1, 'explicit') RETURNING id, v;
-- the database-wide sequence
SELECT snowflake.get_node(snowflake.nextval());
INSERT INTO pt_default (v) VALUES ('default seq') RETURNING v, snowflake.get_node(id) AS node;
RESET ROLE;
-- with USAGE
SET ROLE eq_user;
SELECT snowflake.get_node(snowflake.nextval('ps'));
SELECT snowflake.currval('ps') > :before AS larger;
INSERT INTO pt (v) VALUES ('allowed') RETURNING v, snowflake.get_node(id) AS node;
-- without INSERT on the table
CREATE TABLE pt_owned_by_user (x int);
RESET ROLE;
REVOKE INSERT ON pt FROM eq_user;
SET ROLE eq_user;
INSERT INTO pt (v) VALUES ('no insert');
INSERT INTO pt (v) VALUES ('no insert') RETURNING id;
RESET ROLE;
-- UPDATE alone is enough for nextval, SELECT alone is not
GRANT UPDATE ON SEQUENCE ps TO eq_nouse;
SET ROLE eq_nouse;
SELECT snowflake.get_node(snowflake.nextval('ps'));
RESET ROLE;
REVOKE UPDATE ON SEQUENCE ps FROM eq_nouse;
GRANT SELECT ON SEQUENCE ps TO eq_nouse;
SET ROLE eq_nouse;
SELECT snowflake.nextval('ps');
SELECT snowflake.currval('ps');
RESET ROLE;
-- wrong object types
SELECT snowflake.nextval('pt');
SELECT snowflake.nextval('pt'::regclass);
SELECT snowflake.currval('pt');
CREATE VIEW pv AS SELECT 1 AS x;
SELECT snowflake.nextval('pv');
CREATE INDEX pt_v ON pt (v);
SELECT snowflake.nextval('pt_v');
SELECT snowflake.nextval('no_such_seq');
SELECT snowflake.nextval(0);
SELECT snowflake.nextval(NULL);
SELECT snowflake.nextval('ps', 1);
SELECT snowflake.nextval(1.5);
-- read-only transactions
BEGIN READ ONLY;
SELECT snowflake.nextval();
ROLLBACK;
BEGIN READ ONLY;
SELECT snowflake.nextval('ps');
ROLLBACK;
BEGIN READ ONLY;
INSERT INTO pt (v) VALUES ('read only');
ROLLBACK;
BEGIN;
SET TRANSACTION READ ONLY;
SELECT snowflake.nextval('ps');
SELECT 1;
ROLLBACK;
SET default_transaction_read_only = on;
SELECT snowflake.nextval();
SELECT snowflake.nextval() FROM generate_series(1, 2);
INSERT INTO pt (v) VALUES ('read only');
SELECT snowflake.currval('ps') > :before AS currval_still_works;
SET default_transaction_read_only = off;
SELECT snowflake.get_node(snowflake.nextval());
-- a failed transaction refuses everything until rollback
BEGIN;
SELECT 1/0;
SELECT snowflake.nextval();
SELECT snowflake.get_node(1);
INSERT INTO pt (v) VALUES ('aborted');
ROLLBACK;
SELECT v FROM pt ORDER BY v;
DROP OWNED BY eq_nouse, eq_user;
DROP ROLE eq_nouse;
DROP ROLE eq_user;
