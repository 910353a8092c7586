-- snowflake.node unset or changed within the session. Both runs start with
-- node 1 as the session default (the proxy's --node 1; PGOPTIONS for the
-- direct run), so RESET returns to 1 in both.
\set VERBOSITY verbose
\set SHOW_CONTEXT never
SHOW snowflake.node;
SELECT current_setting('snowflake.node');
SELECT snowflake.get_node(snowflake.nextval());
CREATE TABLE nt (id bigint PRIMARY KEY DEFAULT snowflake.nextval(), v text);
SET snowflake.node = 0;
SHOW snowflake.node;
SELECT snowflake.nextval();
SELECT snowflake.nextval() FROM generate_series(1, 2);
INSERT INTO nt (v) VALUES ('node 0');
INSERT INTO nt (v) SELECT 'node 0 select';
-- currval of an earlier value still works
SELECT snowflake.get_node(snowflake.currval());
RESET snowflake.node;
SHOW snowflake.node;
SELECT snowflake.get_node(snowflake.nextval());
SET snowflake.node = 42;
SELECT snowflake.get_node(snowflake.nextval());
INSERT INTO nt (v) VALUES ('node 42') RETURNING v, snowflake.get_node(id) AS node;
-- SET LOCAL is undone at the end of the transaction, also on rollback
BEGIN;
SET LOCAL snowflake.node = 7;
SHOW snowflake.node;
SELECT snowflake.get_node(snowflake.nextval());
INSERT INTO nt (v) VALUES ('node 7') RETURNING v, snowflake.get_node(id) AS node;
COMMIT;
SHOW snowflake.node;
SELECT snowflake.get_node(snowflake.nextval());
BEGIN;
SET LOCAL snowflake.node = 0;
SELECT snowflake.nextval();
ROLLBACK;
SELECT snowflake.get_node(snowflake.nextval());
-- SET inside a transaction that rolls back is undone
BEGIN;
SET snowflake.node = 9;
SELECT snowflake.get_node(snowflake.nextval());
ROLLBACK;
SELECT snowflake.get_node(snowflake.nextval());
-- set_config, session and local
SELECT set_config('snowflake.node', '0', false);
SELECT snowflake.nextval();
SELECT set_config('snowflake.node', '3', false);
SELECT snowflake.get_node(snowflake.nextval());
BEGIN;
SELECT set_config('snowflake.node', '4', true);
SELECT snowflake.get_node(snowflake.nextval());
COMMIT;
SELECT current_setting('snowflake.node'), snowflake.get_node(snowflake.nextval());
-- RESET ALL and DISCARD ALL return to the session default
SET snowflake.node = 0;
RESET ALL;
SELECT snowflake.get_node(snowflake.nextval());
SET snowflake.node = 0;
DISCARD ALL;
SELECT snowflake.get_node(snowflake.nextval());
-- IDs of different nodes in one table stay distinct
SELECT snowflake.get_node(id) AS node, count(*) FROM nt GROUP BY 1 ORDER BY 1;
