-- snowflake-proxy shim: the per-sequence lock, pasted into the DO blocks of
-- install.sql and update.sql before functions.sql (same rules: idempotent
-- statements, bodies use the tag fn). docs/state-model.md ("The lock")
-- has the argument; in short:
--
-- _issue, _lease and _release serialise their read-compute-write of a
-- sequence S (and its H) with a row lock, SELECT ... FOR UPDATE on the row
-- oid(S) % 1024 of snowflake._locks. Locking a row needs UPDATE on the
-- table, which grants nothing to PUBLIC: only the installer (through those
-- SECURITY DEFINER functions) and roles it grants UPDATE to can take it.
-- The advisory lock used before had a key any role could compute and hold,
-- which stopped every shim call and lease on the sequence. A table lock
-- would not do either: any role that can name a table holds ROW EXCLUSIVE
-- on it by preparing an UPDATE in an open transaction (the privilege is
-- checked at execution), which blocks every self-conflicting mode; FOR
-- UPDATE takes only ROW SHARE on the table, which nothing a role without
-- privileges can hold conflicts with. _issue takes the row in a sub-block
-- that it then rolls back, so the lock ends with the call, not with the
-- caller's transaction; setval is not transactional, so the value stays.
-- The rows are made here, never by a caller: a row inserted by a client's
-- transaction would make every other caller wait for that transaction.
-- Two sequences whose OIDs share a row only wait for each other.
--
-- The window: transactions that were running when the rows of
-- snowflake._locks were made may not see them (a REPEATABLE READ snapshot
-- taken before), and after an update they may still run the earlier shim
-- code from their caches, which takes only the advisory lock. Until every one of them has
-- ended, _issue, _lease and _release take that advisory lock as well
-- (first, then the row; without the row when they cannot see it). The
-- window is open while the sequence snowflake._lock_window_open is not 0,
-- and the function snowflake._lock_window_step (below) closes it.

-- _private removes every grant on rel but its owner's, then grants PUBLIC
-- public_privs (NULL: nothing). What the shim makes is the installer's,
-- and ALTER DEFAULT PRIVILEGES for that role (GRANT ... ON SEQUENCES TO
-- an application role is common) would give other roles its state:
-- UPDATE on an H, on snowflake._hw_narrow or on the lock's table lets a
-- role date IDs ahead, repeat them or stop others' calls (regression).
-- The install and update run it on what exists (functions.sql,
-- "Privileges"), _blocks and _lease on what they make.
CREATE OR REPLACE FUNCTION snowflake._private(rel regclass, public_privs text) RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    g record;
BEGIN
    FOR g IN SELECT DISTINCT a.grantee FROM pg_class c, aclexplode(c.relacl) a
             WHERE c.oid = rel AND a.grantee <> c.relowner LOOP
        EXECUTE format('REVOKE ALL ON %s FROM %s', rel,
                       CASE WHEN g.grantee = 0 THEN 'PUBLIC' ELSE quote_ident(pg_get_userbyid(g.grantee)) END);
    END LOOP;
    IF public_privs IS NOT NULL THEN
        EXECUTE format('GRANT %s ON %s TO PUBLIC', public_privs, rel);
    END IF;
END
$fn$;
REVOKE EXECUTE ON FUNCTION snowflake._private(regclass, text) FROM PUBLIC;

IF pg_catalog.to_regclass('snowflake._lock_window_open') IS NULL THEN
    CREATE SEQUENCE snowflake._lock_window_open AS bigint MINVALUE 0 MAXVALUE 1 START 1 NO CYCLE;
END IF;
IF pg_catalog.to_regclass('snowflake._locks') IS NULL THEN
    CREATE TABLE snowflake._locks (slot integer PRIMARY KEY);
    REVOKE ALL ON TABLE snowflake._locks FROM PUBLIC;
END IF;
-- Making the rows (at the update that brings this lock, or after a
-- restore of the schema without its data) opens the window.
-- Observations made before say nothing about who can see the rows: their
-- table is made anew (DROP waits for their writers to end), and the
-- transaction that makes the rows makes none (see _lock_window_step).
-- A first install, where no shim code existed before this statement,
-- leaves it closed: nothing takes the advisory lock alone, and a
-- transaction whose snapshot predates the rows is refused with 40001
-- (_issue) rather than served under the advisory key, which any role
-- could hold from such a transaction for as long as it liked, with the
-- window kept open by that same transaction (regression).
INSERT INTO snowflake._locks (slot) SELECT pg_catalog.generate_series(0, 1023) ON CONFLICT DO NOTHING;
IF FOUND THEN
    IF pg_catalog.to_regclass('snowflake._lock_window') IS NOT NULL THEN
        DROP TABLE snowflake._lock_window;
    END IF;
    IF pg_catalog.to_regprocedure('snowflake.nextval(regclass)') IS NULL THEN
        PERFORM pg_catalog.setval('snowflake._lock_window_open', 0, true);
    ELSE
        PERFORM pg_catalog.setval('snowflake._lock_window_open', 1, true);
        PERFORM pg_catalog.set_config('snowflake._locks_created', 'on', true);
    END IF;
END IF;
IF pg_catalog.to_regclass('snowflake._lock_window') IS NULL THEN
    CREATE TABLE snowflake._lock_window (vxids text[] NOT NULL);
    REVOKE ALL ON TABLE snowflake._lock_window FROM PUBLIC;
END IF;

-- _lock_window_step closes the window once no transaction that was running
-- when the rows were made can still be running, and returns whether it is
-- still open. Transactions are named by their virtual transaction ids,
-- which pg_locks shows to every role. An observation is
-- the list of this database's transactions running at a step, the step's
-- own included, kept in snowflake._lock_window when the step's transaction
-- commits. A step made after the rows were committed (one that sees them
-- all and did not make them) lists every such transaction still running;
-- so once every transaction of a committed observation has ended, none of
-- them can be running. Closing is final: setval is not transactional, and
-- only making the rows opens the window. Any role may call it: it can
-- neither close the window early nor keep it open.
--
-- pg_stat_activity tells which backends belong to another database or to
-- no role (autovacuum and other background processes): those cannot run
-- the shim. It is read afresh (pg_stat_clear_snapshot), as a transaction
-- otherwise keeps what it read first, which could miss a backend begun
-- since. Steps in SERIALIZABLE transactions do nothing: reading and
-- writing the table there could make the caller's transaction fail to
-- serialise.
CREATE OR REPLACE FUNCTION snowflake._lock_window_step() RETURNS boolean
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    running text[];
    done bigint;
BEGIN
    IF coalesce(pg_sequence_last_value('snowflake._lock_window_open'::regclass), 1) = 0 THEN
        RETURN false;
    END IF;
    IF current_setting('transaction_isolation') = 'serializable'
       OR current_setting('snowflake._locks_created', true) = 'on'
       OR (SELECT count(*) FROM snowflake._locks) < 1024 THEN
        RETURN true;
    END IF;
    PERFORM pg_stat_clear_snapshot();
    SELECT coalesce(array_agg(l.virtualxid), '{}') INTO running
    FROM pg_locks l
    WHERE l.locktype = 'virtualxid' AND l.granted
      AND NOT EXISTS (SELECT FROM pg_stat_activity a
                      WHERE a.pid = l.pid
                        AND (a.datname IS DISTINCT FROM current_database() OR a.usesysid IS NULL));
    IF EXISTS (SELECT FROM snowflake._lock_window w WHERE NOT (w.vxids && running)) THEN
        done := setval('snowflake._lock_window_open', 0, true);
        RETURN false;
    END IF;
    -- The first observations decide; a few more stand in for those whose
    -- transactions roll back.
    IF (SELECT count(*) FROM snowflake._lock_window) < 16 THEN
        INSERT INTO snowflake._lock_window (vxids) VALUES (running);
    END IF;
    RETURN true;
END
$fn$;
