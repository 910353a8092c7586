-- proxy-only: a stock server cannot validate or protect the placeholder
-- setting snowflake.node for direct sessions (no extension library is
-- loaded), so this script has no direct counterpart; its golden file is the
-- contract, written from what the pgEdge extension does (docs/compatibility.md:
-- an integer 0..1023, superuser only).
-- roles: eq_node_user
\set VERBOSITY verbose
\set SHOW_CONTEXT never
SET snowflake.node = -1;
SET snowflake.node = 1024;
SET snowflake.node = 'abc';
SET snowflake.node = 1023;
SHOW snowflake.node;
SELECT snowflake.get_node(snowflake.nextval());
RESET snowflake.node;
CREATE ROLE eq_node_user;
SET ROLE eq_node_user;
SET snowflake.node = 5;
SELECT set_config('snowflake.node', '5', false);
SHOW snowflake.node;
SELECT snowflake.get_node(snowflake.nextval());
RESET ROLE;
DROP ROLE eq_node_user;
