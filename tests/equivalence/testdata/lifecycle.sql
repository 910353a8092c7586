-- CREATE/DROP EXTENSION snowflake: command tags, notices and errors as
-- PostgreSQL gives them for any extension. The shim is installed before
-- the script runs. A server without extension files cannot run these
-- statements directly, so the direct run uses the contrib extension
-- pgcrypto in the same situation and its names are mapped to snowflake's.
-- proxy-var: ext=snowflake
-- proxy-var: exttype=bigint
-- proxy-var: extdefault=snowflake.nextval()
-- proxy-var: extfunc=snowflake.nextval
-- direct-var: ext=pgcrypto
-- direct-var: exttype=bytea
-- direct-var: extdefault=gen_random_bytes(8)
-- direct-var: extfunc=gen_random_bytes
-- direct-setup: CREATE EXTENSION pgcrypto
-- direct-replace: "pgcrypto" => "snowflake"
-- direct-replace: extension pgcrypto => extension snowflake
-- direct-replace: function gen_random_bytes(integer) => function snowflake.nextval(regclass)
\set VERBOSITY verbose
\set SHOW_CONTEXT never
CREATE EXTENSION IF NOT EXISTS :ext;
CREATE EXTENSION :ext;
-- other extensions (a missing one's error differs between versions and
-- names the server's installation directory)
CREATE EXTENSION IF NOT EXISTS plpgsql;
DROP EXTENSION no_such_extension;
DROP EXTENSION IF EXISTS no_such_extension;
-- a column default depends on the extension
CREATE TABLE lt (id :exttype DEFAULT :extdefault, v text);
DROP EXTENSION :ext;
DROP EXTENSION :ext RESTRICT;
DROP EXTENSION :ext CASCADE;
SELECT column_default FROM information_schema.columns WHERE table_name = 'lt' AND column_name = 'id';
SELECT to_regproc(:'extfunc') IS NOT NULL AS installed;
DROP EXTENSION :ext;
DROP EXTENSION IF EXISTS :ext;
CREATE EXTENSION IF NOT EXISTS :ext;
CREATE EXTENSION :ext;
-- inside a transaction that rolls back
BEGIN;
DROP EXTENSION :ext;
ROLLBACK;
SELECT to_regproc(:'extfunc') IS NOT NULL AS installed;
CREATE EXTENSION :ext;
BEGIN;
DROP EXTENSION :ext;
DROP EXTENSION :ext;
ROLLBACK;
DROP TABLE lt;
SELECT to_regproc(:'extfunc') IS NOT NULL AS installed;
DROP EXTENSION :ext;
SELECT to_regproc(:'extfunc') IS NOT NULL AS installed;
BEGIN;
CREATE EXTENSION :ext;
ROLLBACK;
SELECT to_regproc(:'extfunc') IS NOT NULL AS installed;
DROP EXTENSION :ext;
CREATE EXTENSION :ext CASCADE;
SELECT to_regproc(:'extfunc') IS NOT NULL AS installed;
DROP EXTENSION IF EXISTS :ext, no_such_extension;
SELECT to_regproc(:'extfunc') IS NOT NULL AS installed;
