-- Unqualified sequence and table names resolve through the session's
-- search_path, as the server resolves them, also after SET search_path,
-- SET LOCAL and RESET.
\set VERBOSITY verbose
\set SHOW_CONTEXT never
CREATE SCHEMA sa;
CREATE SCHEMA sb;
CREATE SEQUENCE sa.s;
CREATE SEQUENCE sb.s;
CREATE TABLE sa.t (id bigint PRIMARY KEY DEFAULT snowflake.nextval('sa.s'), v text);
CREATE TABLE sb.t (id bigint PRIMARY KEY DEFAULT snowflake.nextval('sb.s'), v text);
SHOW search_path;
SELECT snowflake.nextval('s');
SET search_path = sa, public;
SELECT snowflake.nextval('s') AS a1 \gset
SELECT snowflake.currval('sa.s') = :a1 AS from_sa;
SELECT snowflake.currval('sb.s');
INSERT INTO t (v) VALUES ('into sa') RETURNING v;
SELECT snowflake.currval('sa.s') = (SELECT max(id) FROM sa.t) AS sa_default;
SET search_path = sb;
SELECT snowflake.nextval('s') AS b1 \gset
SELECT snowflake.currval('sb.s') = :b1 AS from_sb, snowflake.currval('sa.s') = :a1 AS sa_unchanged;
INSERT INTO t (v) VALUES ('into sb') RETURNING v;
SELECT snowflake.currval('sb.s') = (SELECT max(id) FROM sb.t) AS sb_default;
SELECT snowflake.currval('s') = (SELECT max(id) FROM sb.t) AS unqualified_currval;
-- snowflake functions still qualified; nextval() uses snowflake.id_seq
SELECT snowflake.get_node(snowflake.nextval());
-- SET LOCAL inside a transaction, undone at commit
BEGIN;
SET LOCAL search_path = sa;
INSERT INTO t (v) VALUES ('local sa') RETURNING v;
SELECT snowflake.nextval('s') = snowflake.currval('sa.s') AS local_sa;
COMMIT;
SHOW search_path;
INSERT INTO t (v) VALUES ('after local: sb') RETURNING v;
-- search_path in the same statement string as the call
SET search_path = sa; INSERT INTO t (v) VALUES ('same string sa') RETURNING v;
SELECT set_config('search_path', 'sb', false);
INSERT INTO t (v) VALUES ('set_config sb') RETURNING v;
SELECT snowflake.nextval('s') = snowflake.currval('sb.s') AS set_config_sb;
-- a schema listed first that does not exist, then a quoted one
CREATE SCHEMA "Mixed Case";
CREATE SEQUENCE "Mixed Case".s;
SET search_path = nosuch, "Mixed Case", sa;
SELECT snowflake.nextval('s') = snowflake.currval('"Mixed Case".s') AS quoted_schema;
INSERT INTO t (v) VALUES ('mixed path: sa table') RETURNING v;
-- the sequence created later in a schema earlier in the path wins
SET search_path = sa, sb;
SELECT snowflake.nextval('only_b');
CREATE SEQUENCE sb.only_b;
SELECT snowflake.nextval('only_b') = snowflake.currval('sb.only_b') AS found_in_sb;
CREATE SEQUENCE sa.only_b;
SELECT snowflake.nextval('only_b') = snowflake.currval('sa.only_b') AS now_sa;
-- RESET
RESET search_path;
SHOW search_path;
SELECT snowflake.nextval('s');
INSERT INTO t (v) VALUES ('no t in public');
SELECT 'sa' AS schema, v FROM sa.t UNION ALL SELECT 'sb', v FROM sb.t ORDER BY 1, 2;
-- a search_path from ALTER ROLE ... SET applies to new sessions
ALTER ROLE postgres IN DATABASE :"DBNAME" SET search_path = sb;
\set QUIET on
\c
\set QUIET off
SHOW search_path;
INSERT INTO t (v) VALUES ('role default sb') RETURNING v;
SELECT snowflake.nextval('s') = snowflake.currval('sb.s') AS role_path_sb;
ALTER ROLE postgres IN DATABASE :"DBNAME" RESET search_path;
