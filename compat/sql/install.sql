-- snowflake-proxy shim: CREATE EXTENSION snowflake, as one DO statement run
-- in the client's own session and transaction (so it is as transactional
-- as the real CREATE EXTENSION). compat fills the placeholders in double
-- braces: IF_NOT_EXISTS and CASCADE are true/false, VERSION and SCHEMA are
-- SQL literals or NULL, VERSIONS is the array of versions the shim
-- installs (oldest first), DEFAULT_VERSION and REPAIR_FROM literals,
-- LOCKS is locks.sql, FUNCTIONS functions.sql, EVENT_TRIGGERS events.sql,
-- VERSION_NAME versionname.sql and REPAIR repair.sql.
DO $sfshim$
DECLARE
    v_versions text[] := {{VERSIONS}};
    v_version text := coalesce({{VERSION}}, {{DEFAULT_VERSION}});
    v_schema text := {{SCHEMA}};
    v_created boolean := false;
    v_super boolean;
    v_acl record;
BEGIN
    -- Checks in PostgreSQL's order: exists, version, schema.
    IF EXISTS (SELECT 1 FROM pg_catalog.pg_extension WHERE extname = 'snowflake')
       OR pg_catalog.to_regprocedure('snowflake._shim_version()') IS NOT NULL THEN
        IF {{IF_NOT_EXISTS}} THEN
            RAISE NOTICE 'extension "snowflake" already exists, skipping' USING ERRCODE = 'duplicate_object';
            RETURN;
        END IF;
        RAISE EXCEPTION 'extension "snowflake" already exists' USING ERRCODE = 'duplicate_object';
    END IF;
{{VERSION_NAME}}
    IF pg_catalog.array_position(v_versions, v_version) IS NULL THEN
        RAISE EXCEPTION 'extension "snowflake" has no installation script nor update path for version "%"', v_version
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF v_schema IS NOT NULL AND v_schema <> 'snowflake' AND NOT {{CASCADE}} THEN
        RAISE EXCEPTION 'extension "snowflake" must be installed in schema "snowflake"'
            USING ERRCODE = 'feature_not_supported';
    END IF;

    IF pg_catalog.to_regnamespace('snowflake') IS NULL THEN
        CREATE SCHEMA snowflake;
        v_created := true;
    END IF;
    -- The mark DROP EXTENSION looks for: a schema that the shim created is
    -- dropped with it, a schema that existed before keeps everything else.
    EXECUTE pg_catalog.format('COMMENT ON SCHEMA snowflake IS %L',
        CASE WHEN v_created THEN 'snowflake-proxy shim: pgEdge snowflake API in SQL'
             ELSE pg_catalog.obj_description(pg_catalog.to_regnamespace('snowflake'), 'pg_namespace') END);
    IF pg_catalog.to_regclass('snowflake.id_seq') IS NULL THEN
        CREATE SEQUENCE snowflake.id_seq;
    END IF;

{{LOCKS}}
{{FUNCTIONS}}
    -- Default privileges of the installer do not reach the shim's
    -- functions, as they do not its tables and sequences (_private): an
    -- application role given EXECUTE on the installer's new functions
    -- would run the proxies' _lease and _release (regression). At the
    -- install nothing was granted on them on purpose yet.
    FOR v_acl IN
        SELECT DISTINCT p.oid::pg_catalog.regprocedure AS fn, a.grantee
        FROM pg_catalog.pg_proc p, pg_catalog.aclexplode(p.proacl) a
        WHERE p.pronamespace = 'snowflake'::pg_catalog.regnamespace AND a.grantee NOT IN (p.proowner, 0)
    LOOP
        EXECUTE pg_catalog.format('REVOKE ALL ON FUNCTION %s FROM %I', v_acl.fn,
                                  pg_catalog.pg_get_userbyid(v_acl.grantee));
    END LOOP;

    -- No earlier shim code can be running: leases need not wait for it
    -- (see _lease).
    COMMENT ON SEQUENCE snowflake._hw_count IS 'settled';
    EXECUTE pg_catalog.format(
        'CREATE OR REPLACE FUNCTION snowflake._shim_owns_schema() RETURNS boolean LANGUAGE sql IMMUTABLE AS %L',
        'SELECT ' || v_created::text);
    -- The installed version: what pg_extension.extversion would say.
    EXECUTE pg_catalog.format(
        'CREATE OR REPLACE FUNCTION snowflake._shim_version() RETURNS text LANGUAGE sql IMMUTABLE PARALLEL SAFE AS %L',
        'SELECT ' || pg_catalog.quote_literal(v_version) || '::text');
    GRANT EXECUTE ON FUNCTION snowflake._shim_version() TO PUBLIC;
    IF pg_catalog.array_position(v_versions, v_version) >= pg_catalog.array_position(v_versions, {{REPAIR_FROM}}) THEN
{{REPAIR}}
    END IF;

    -- Catalog-change notifications for the proxy's caches need an event
    -- trigger, which only a superuser may create; without one the proxy
    -- falls back to its documented cache expiry.
    SELECT rolsuper INTO v_super FROM pg_catalog.pg_roles WHERE rolname = current_user;
    IF v_super THEN
{{EVENT_TRIGGERS}}
    END IF;
END
$sfshim$
