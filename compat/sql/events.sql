-- snowflake-proxy shim: event triggers (installed only by a superuser).
-- Pasted into the DO blocks of install.sql and update.sql; bodies use the tag fn.
--
-- _ddl_notify tells listening proxies that the catalog changed (NOTIFY
-- snowflake_proxy_catalog, payload: the command tag), so that they refresh
-- their caches of snowflake column defaults, increments and privileges.
-- The shim's own H and block sequences (_lease, _blocks) are not worth a
-- message.
CREATE OR REPLACE FUNCTION snowflake._ddl_notify() RETURNS event_trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    r record;
BEGIN
    -- The GRANTs of _blocks on the block sequences it makes, which name no
    -- object here: skipped while it runs (as the installer, whom no other
    -- role can act as).
    IF current_setting('snowflake._blocks_ddl', true) = 'on'
       AND current_user = (SELECT pg_get_userbyid(p.proowner) FROM pg_proc p
                           WHERE p.oid = to_regprocedure('snowflake._blocks(regclass, integer)')) THEN
        RETURN;
    END IF;
    -- DROP commands report no rows here (sql_drop has them): notify.
    IF NOT EXISTS (SELECT 1 FROM pg_event_trigger_ddl_commands())
       OR EXISTS (SELECT 1 FROM pg_event_trigger_ddl_commands() c
                  WHERE NOT (c.schema_name = 'snowflake' AND c.object_type = 'sequence'
                             AND (c.object_identity LIKE 'snowflake.\_hw\_%'
                                  OR c.object_identity LIKE 'snowflake.\_blk\_%'
                                  OR c.object_identity LIKE 'snowflake.\_blkd\_%'))) THEN
        PERFORM pg_notify('snowflake_proxy_catalog', tg_tag);
    END IF;
    -- The per-row blocks of the sequences that a snowflake.nextval default
    -- of a table this command made or changed names, made here so that the
    -- next statement is planned with them (docs/state-model.md, "Blocks
    -- made with the DDL"), for the session's node and those the
    -- database's settings name. An optimisation: any failure leaves it to
    -- the proxy's catalog watch.
    IF EXISTS (SELECT 1 FROM pg_event_trigger_ddl_commands() c
               WHERE c.classid = 'pg_class'::regclass AND c.object_type = 'table') THEN
        BEGIN
            FOR r IN
                SELECT DISTINCT q.refobjid::regclass AS seq, x.m AS node
                FROM pg_event_trigger_ddl_commands() c
                JOIN pg_attrdef a ON a.adrelid = c.objid
                JOIN pg_depend f ON f.classid = 'pg_attrdef'::regclass AND f.objid = a.oid
                     AND f.refclassid = 'pg_proc'::regclass
                     AND f.refobjid = 'snowflake.nextval(regclass)'::regprocedure
                JOIN pg_depend q ON q.classid = f.classid AND q.objid = f.objid
                     AND q.refclassid = 'pg_class'::regclass
                JOIN pg_class s ON s.oid = q.refobjid AND s.relkind = 'S',
                unnest(snowflake._blk_nodes(NULL)) AS x(m)
                WHERE c.classid = 'pg_class'::regclass AND c.object_type = 'table'
            LOOP
                PERFORM snowflake._blocks_at_ddl(r.seq, r.node);
            END LOOP;
        EXCEPTION WHEN OTHERS THEN
            NULL;
        END;
    END IF;
END
$fn$;

-- _ddl_drop removes the H and block sequences of a dropped sequence (its
-- OID may be reused later) and tells the proxies.
CREATE OR REPLACE FUNCTION snowflake._ddl_drop() RETURNS event_trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    r record;
    notify boolean := false;
BEGIN
    FOR r IN SELECT o.objid, o.object_type, o.schema_name FROM pg_event_trigger_dropped_objects() o LOOP
        IF r.schema_name = 'snowflake' THEN
            CONTINUE;
        END IF;
        notify := true;
        IF r.object_type = 'sequence' THEN
            PERFORM snowflake._drop_leftovers(r.objid);
        END IF;
    END LOOP;
    IF notify THEN
        PERFORM pg_notify('snowflake_proxy_catalog', tg_tag);
    END IF;
END
$fn$;

IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_event_trigger WHERE evtname = 'snowflake_ddl_notify') THEN
    CREATE EVENT TRIGGER snowflake_ddl_notify ON ddl_command_end EXECUTE FUNCTION snowflake._ddl_notify();
END IF;
IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_event_trigger WHERE evtname = 'snowflake_ddl_drop') THEN
    CREATE EVENT TRIGGER snowflake_ddl_drop ON sql_drop EXECUTE FUNCTION snowflake._ddl_drop();
END IF;
