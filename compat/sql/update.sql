-- snowflake-proxy shim: ALTER EXTENSION snowflake UPDATE [TO v], as one DO
-- statement. The placeholder VERSION is a SQL literal or NULL. The functions are
-- re-created in place (CREATE OR REPLACE): sequences, H sequences and the
-- objects that depend on the functions are kept.
DO $sfshim$
DECLARE
    v_version text := {{VERSION}};
    v_have text;
    v_super boolean;
BEGIN
    IF EXISTS (SELECT 1 FROM pg_catalog.pg_extension WHERE extname = 'snowflake') THEN
        EXECUTE 'ALTER EXTENSION snowflake UPDATE'
            || CASE WHEN v_version IS NULL THEN '' ELSE ' TO ' || pg_catalog.quote_literal(v_version) END;
        RETURN;
    END IF;
    IF pg_catalog.to_regprocedure('snowflake._shim_version()') IS NULL THEN
        RAISE EXCEPTION 'extension "snowflake" does not exist' USING ERRCODE = 'undefined_object';
    END IF;
    v_have := snowflake._shim_version();
    v_version := coalesce(v_version, '{{SHIM_VERSION}}');
    IF v_version <> '{{SHIM_VERSION}}' THEN
        RAISE EXCEPTION 'extension "snowflake" has no update path from version "%" to version "%"', v_have, v_version
            USING ERRCODE = 'invalid_parameter_value';
    END IF;

    IF pg_catalog.to_regclass('snowflake.id_seq') IS NULL THEN
        CREATE SEQUENCE snowflake.id_seq;
    END IF;

{{FUNCTIONS}}

    IF pg_catalog.to_regprocedure('snowflake._shim_owns_schema()') IS NULL THEN
        CREATE FUNCTION snowflake._shim_owns_schema() RETURNS boolean LANGUAGE sql IMMUTABLE AS 'SELECT true';
    END IF;
    SELECT rolsuper INTO v_super FROM pg_catalog.pg_roles WHERE rolname = current_user;
    IF v_super THEN
{{EVENT_TRIGGERS}}
    END IF;

    IF v_have = v_version THEN
        RAISE NOTICE 'version "%" of extension "snowflake" is already installed', v_version;
    END IF;
END
$sfshim$
