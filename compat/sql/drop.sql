-- snowflake-proxy shim: DROP EXTENSION snowflake, as one DO statement run in
-- the client's session and transaction. The placeholders IF_EXISTS and
-- CASCADE are true/false; DROP_OTHERS drops other extensions the statement
-- names, or is empty.
DO $sfshim$
DECLARE
    v_owns boolean;
    v_deps text[];
    v_n integer;
    v_msgs text;
BEGIN
    -- Other extensions named by the same DROP EXTENSION (one statement:
    -- an error anywhere undoes all of it).
    {{DROP_OTHERS}}
    IF EXISTS (SELECT 1 FROM pg_catalog.pg_extension WHERE extname = 'snowflake') THEN
        -- The real extension is installed: let PostgreSQL drop it.
        EXECUTE 'DROP EXTENSION snowflake' || CASE WHEN {{CASCADE}} THEN ' CASCADE' ELSE '' END;
        RETURN;
    END IF;
    IF pg_catalog.to_regprocedure('snowflake._shim_version()') IS NULL THEN
        IF {{IF_EXISTS}} THEN
            RAISE NOTICE 'extension "snowflake" does not exist, skipping'; -- SQLSTATE 00000, as PostgreSQL's DROP ... IF EXISTS
            RETURN;
        END IF;
        RAISE EXCEPTION 'extension "snowflake" does not exist' USING ERRCODE = 'undefined_object';
    END IF;
    v_owns := coalesce(pg_catalog.to_regprocedure('snowflake._shim_owns_schema()') IS NULL, true)
              OR snowflake._shim_owns_schema();

    -- Objects outside the shim that depend on it, worded as PostgreSQL's
    -- dependency report words them.
    WITH ours AS (
        SELECT 'pg_catalog.pg_proc'::pg_catalog.regclass AS classid, p.oid AS objid
        FROM pg_catalog.pg_proc p WHERE p.pronamespace = 'snowflake'::pg_catalog.regnamespace
        UNION ALL
        SELECT 'pg_catalog.pg_class'::pg_catalog.regclass, c.oid
        FROM pg_catalog.pg_class c
        WHERE c.relnamespace = 'snowflake'::pg_catalog.regnamespace AND c.relkind = 'S'
          AND (c.relname IN ('id_seq', '_lock_window_open') OR c.relname LIKE '\_hw\_%'
               OR c.relname LIKE '\_blk\_%' OR c.relname LIKE '\_blkd\_%')
        UNION ALL
        -- The lock's tables (locks.sql), the proxies' node claim table
        -- (compat/claimdb.go) and the constraints that depend on them.
        SELECT 'pg_catalog.pg_class'::pg_catalog.regclass, c.oid
        FROM pg_catalog.pg_class c
        WHERE c.oid IN (pg_catalog.to_regclass('snowflake._claims'), pg_catalog.to_regclass('snowflake._locks'),
                        pg_catalog.to_regclass('snowflake._lock_window'), pg_catalog.to_regclass('snowflake._narrow'))
        UNION ALL
        SELECT 'pg_catalog.pg_constraint'::pg_catalog.regclass, k.oid
        FROM pg_catalog.pg_constraint k
        WHERE k.conrelid IN (pg_catalog.to_regclass('snowflake._claims'), pg_catalog.to_regclass('snowflake._locks'),
                             pg_catalog.to_regclass('snowflake._lock_window'), pg_catalog.to_regclass('snowflake._narrow'))
        UNION ALL
        SELECT 'pg_catalog.pg_event_trigger'::pg_catalog.regclass, e.oid
        FROM pg_catalog.pg_event_trigger e WHERE e.evtname LIKE 'snowflake\_%'
        UNION ALL
        SELECT 'pg_catalog.pg_namespace'::pg_catalog.regclass, 'snowflake'::pg_catalog.regnamespace::oid
        WHERE v_owns
    ), dep AS (
        SELECT DISTINCT
            -- a view's _RETURN rule is reported as the view itself
            CASE WHEN d.classid = 'pg_catalog.pg_rewrite'::pg_catalog.regclass AND r.rulename = '_RETURN'
                 THEN pg_catalog.pg_describe_object('pg_catalog.pg_class'::pg_catalog.regclass, r.ev_class, 0)
                 ELSE pg_catalog.pg_describe_object(d.classid, d.objid, d.objsubid) END AS what,
            pg_catalog.pg_describe_object(d.refclassid, d.refobjid, 0) AS onwhat
        FROM pg_catalog.pg_depend d
        JOIN ours o ON o.classid = d.refclassid AND o.objid = d.refobjid
        LEFT JOIN pg_catalog.pg_rewrite r
               ON d.classid = 'pg_catalog.pg_rewrite'::pg_catalog.regclass AND r.oid = d.objid
        WHERE d.deptype IN ('n', 'a')
          AND NOT EXISTS (SELECT 1 FROM ours o2 WHERE o2.classid = d.classid AND o2.objid = d.objid)
    )
    SELECT pg_catalog.array_agg(what || E'\x01' || onwhat ORDER BY what, onwhat) INTO v_deps FROM dep;

    v_n := coalesce(pg_catalog.array_length(v_deps, 1), 0);
    IF v_n > 0 THEN
        IF NOT {{CASCADE}} THEN
            SELECT pg_catalog.string_agg(pg_catalog.split_part(x, E'\x01', 1) || ' depends on '
                                         || pg_catalog.split_part(x, E'\x01', 2), E'\n')
            INTO v_msgs FROM pg_catalog.unnest(v_deps) AS x;
            RAISE EXCEPTION 'cannot drop extension snowflake because other objects depend on it'
                USING ERRCODE = 'dependent_objects_still_exist', DETAIL = v_msgs,
                      HINT = 'Use DROP ... CASCADE to drop the dependent objects too.';
        END IF;
        SELECT pg_catalog.string_agg(DISTINCT 'drop cascades to ' || pg_catalog.split_part(x, E'\x01', 1), E'\n')
        INTO v_msgs FROM pg_catalog.unnest(v_deps) AS x;
        SELECT pg_catalog.count(DISTINCT pg_catalog.split_part(x, E'\x01', 1)) INTO v_n
        FROM pg_catalog.unnest(v_deps) AS x;
        IF v_n = 1 THEN
            RAISE NOTICE '%', v_msgs;
        ELSE
            RAISE NOTICE 'drop cascades to % other objects', v_n USING DETAIL = v_msgs;
        END IF;
    END IF;

    -- Drop quietly: the shim's own objects are not the user's business.
    DECLARE
        v_cmm text := pg_catalog.current_setting('client_min_messages');
        r record;
    BEGIN
        PERFORM pg_catalog.set_config('client_min_messages', 'warning', true);
        FOR r IN SELECT e.evtname FROM pg_catalog.pg_event_trigger e WHERE e.evtname LIKE 'snowflake\_%' LOOP
            EXECUTE pg_catalog.format('DROP EVENT TRIGGER %I', r.evtname);
        END LOOP;
        IF v_owns THEN
            DROP SCHEMA snowflake CASCADE;
        ELSE
            FOR r IN SELECT p.oid::pg_catalog.regprocedure AS f FROM pg_catalog.pg_proc p
                     WHERE p.pronamespace = 'snowflake'::pg_catalog.regnamespace LOOP
                EXECUTE pg_catalog.format('DROP FUNCTION IF EXISTS %s CASCADE', r.f);
            END LOOP;
            FOR r IN SELECT c.relname FROM pg_catalog.pg_class c
                     WHERE c.relnamespace = 'snowflake'::pg_catalog.regnamespace AND c.relkind = 'S'
                       AND (c.relname IN ('id_seq', '_lock_window_open') OR c.relname LIKE '\_hw\_%'
               OR c.relname LIKE '\_blk\_%' OR c.relname LIKE '\_blkd\_%') LOOP
                EXECUTE pg_catalog.format('DROP SEQUENCE snowflake.%I CASCADE', r.relname);
            END LOOP;
            DROP TABLE IF EXISTS snowflake._locks, snowflake._lock_window, snowflake._narrow;
            -- The proxies' claim table, owned by their control role: the
            -- schema's owner may drop it.
            DROP TABLE IF EXISTS snowflake._claims;
        END IF;
        PERFORM pg_catalog.set_config('client_min_messages', v_cmm, true);
    END;
END
$sfshim$
