-- snowflake-proxy shim: ALTER EXTENSION snowflake UPDATE [TO v], as one DO
-- statement. The placeholders are those of install.sql. The functions are
-- re-created in place (CREATE OR REPLACE): sequences, H sequences and the
-- objects that depend on the functions are kept. That happens also when
-- the version does not change, so that ALTER EXTENSION snowflake UPDATE
-- brings the shim's code up to the proxy's.
DO $sfshim$
DECLARE
    v_versions text[] := {{VERSIONS}};
    v_version text := coalesce({{VERSION}}, {{DEFAULT_VERSION}});
    v_have text;
    v_from integer;
    v_to integer;
    v_super boolean;
BEGIN
    IF EXISTS (SELECT 1 FROM pg_catalog.pg_extension WHERE extname = 'snowflake') THEN
        EXECUTE 'ALTER EXTENSION snowflake UPDATE'
            || CASE WHEN {{VERSION}} IS NULL THEN '' ELSE ' TO ' || pg_catalog.quote_literal(v_version) END;
        RETURN;
    END IF;
    -- Checks in PostgreSQL's order: exists, owner, version name, same
    -- version, update path.
    IF pg_catalog.to_regprocedure('snowflake._shim_version()') IS NULL THEN
        RAISE EXCEPTION 'extension "snowflake" does not exist' USING ERRCODE = 'undefined_object';
    END IF;
    v_have := snowflake._shim_version();
    -- The installer owns the shim's functions, as the extension's owner is
    -- the role that created it.
    IF NOT pg_catalog.pg_has_role(current_user,
            (SELECT p.proowner FROM pg_catalog.pg_proc p
             WHERE p.oid = 'snowflake._shim_version()'::pg_catalog.regprocedure), 'USAGE') THEN
        RAISE EXCEPTION 'must be owner of extension snowflake' USING ERRCODE = 'insufficient_privilege';
    END IF;
{{VERSION_NAME}}
    v_from := pg_catalog.array_position(v_versions, v_have);
    v_to := pg_catalog.array_position(v_versions, v_version);
    -- No path leads back: PostgreSQL has no downgrade scripts for it.
    IF v_have <> v_version AND (v_from IS NULL OR v_to IS NULL OR v_to < v_from) THEN
        RAISE EXCEPTION 'extension "snowflake" has no update path from version "%" to version "%"', v_have, v_version
            USING ERRCODE = 'invalid_parameter_value';
    END IF;

    IF pg_catalog.to_regclass('snowflake.id_seq') IS NULL THEN
        CREATE SEQUENCE snowflake.id_seq;
    END IF;

{{LOCKS}}
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
        RETURN;
    END IF;
    EXECUTE pg_catalog.format(
        'CREATE OR REPLACE FUNCTION snowflake._shim_version() RETURNS text LANGUAGE sql IMMUTABLE PARALLEL SAFE AS %L',
        'SELECT ' || pg_catalog.quote_literal(v_version) || '::text');
    IF v_from < pg_catalog.array_position(v_versions, {{REPAIR_FROM}})
       AND v_to >= pg_catalog.array_position(v_versions, {{REPAIR_FROM}}) THEN
{{REPAIR}}
    END IF;
END
$sfshim$
