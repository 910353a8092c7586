-- snowflake-proxy shim: the functions of the pgEdge snowflake API.
--
-- This file is a list of idempotent statements (CREATE OR REPLACE, GRANT)
-- that install.sql and update.sql paste into the body of their DO block, so
-- it must not use the dollar-quote tag of that block. Function bodies use
-- the tag fn. It assumes the schema snowflake and snowflake.id_seq
-- exist.
--
-- State model (docs/state-model.md has the argument why no ID repeats):
--   S            the user's sequence; its last_value is the highest
--                position (ms<<12|count) issued from it by the shim, raised
--                by each lease to what the proxy issued from the one before;
--   H(s, N)      snowflake."_hw_<oid>_<node>", created only by _lease on the
--                proxy's control connection: the top of node N's leases
--                and of the shim's IDs of node N above them;
--   _hw_count    a sequence that _lease advances whenever it creates an H,
--                so that a shim call that finds no H knows whether looking
--                harder could find one (see _issue);
--   zones        the proxy's generator issues counts 0 .. 3071 of a
--                millisecond; while a lease of node N reaches more than 5 ms
--                past the clock and S, the shim of node N issues counts
--                3072 .. 4095 above S, otherwise the pgEdge rule above S and
--                H;
--   the lock     a row lock on row oid % 1024 of the private table
--                snowflake._locks (sql/locks.sql), held by the shim only for
--                the few statements that read and write S and H (a sub-block
--                rolled back at its end) and by _lease and _release until
--                their commit.

-- snowflake._shim_version() is not here: install.sql and update.sql define
-- it with the version they install.

-- Decoding. SQL functions without SET clauses so the planner inlines them.
CREATE OR REPLACE FUNCTION snowflake.get_epoch(bigint) RETURNS numeric
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
AS $fn$SELECT pg_catalog.round(((($1 OPERATOR(pg_catalog.>>) 22) OPERATOR(pg_catalog.&) 2199023255551) OPERATOR(pg_catalog.+) 1672531200000)::numeric OPERATOR(pg_catalog./) 1000, 3)$fn$;

CREATE OR REPLACE FUNCTION snowflake.get_count(bigint) RETURNS integer
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
AS $fn$SELECT ($1 OPERATOR(pg_catalog.&) 4095)::integer$fn$;

CREATE OR REPLACE FUNCTION snowflake.get_node(bigint) RETURNS integer
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
AS $fn$SELECT (($1 OPERATOR(pg_catalog.>>) 12) OPERATOR(pg_catalog.&) 1023)::integer$fn$;

-- format is STABLE: ts is the text of a timestamptz, so it follows the
-- session's TimeZone and DateStyle.
CREATE OR REPLACE FUNCTION snowflake.format(bigint) RETURNS jsonb
LANGUAGE sql STABLE STRICT PARALLEL SAFE
AS $fn$SELECT pg_catalog.jsonb_build_object(
    'id', snowflake.get_node($1),
    'ts', pg_catalog.to_timestamp(snowflake.get_epoch($1)::double precision)::text,
    'count', snowflake.get_count($1))$fn$;

-- Sequences narrower than a snowflake (a MAXVALUE below it, AS integer or
-- smallint, a descending sequence) cannot hold the IDs issued from them:
-- setval honours the bounds, where the extension's C code writes past
-- them. Such a position goes to snowflake._hw_narrow instead, one bigint
-- sequence for the database (non-transactional, like S): the highest
-- position issued from any sequence that could not hold it. Every reader
-- of S takes the larger of S and it, so a sequence's IDs stay above
-- everything issued from it whichever of the two holds it, also after
-- someone widens S without raising it; sharing it only makes the IDs of
-- two narrow sequences avoid each other's counts. The row seq = 0 of
-- snowflake._narrow is its lock (a sequence never has OID 0); the other
-- rows name the sequences that used it, for the 2.5.0 repair
-- (sql/repair.sql) and for leases, which widen them (_lease).
-- docs/state-model.md, "Narrow sequences".
IF to_regclass('snowflake._hw_narrow') IS NULL THEN
    CREATE SEQUENCE snowflake._hw_narrow AS bigint MINVALUE 0 START 0 NO CYCLE;
END IF;
IF to_regclass('snowflake._narrow') IS NULL THEN
    CREATE TABLE snowflake._narrow (seq oid NOT NULL);
    REVOKE ALL ON TABLE snowflake._narrow FROM PUBLIC;
END IF;
IF NOT EXISTS (SELECT FROM snowflake._narrow WHERE seq = 0) THEN
    INSERT INTO snowflake._narrow (seq) VALUES (0);
END IF;

-- _narrow_put raises snowflake._hw_narrow to pos under its lock. The
-- caller holds the lock of the sequence pos was issued from; this lock
-- is always taken after that one, and nothing is taken after it, so no
-- two callers wait for each other in a cycle. It is a helper of the
-- SECURITY DEFINER functions below, not for PUBLIC (see the REVOKE at the
-- end): the lock lasts until the caller's (sub)transaction ends.
CREATE OR REPLACE FUNCTION snowflake._narrow_put(pos bigint) RETURNS void
LANGUAGE plpgsql VOLATILE STRICT
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    done bigint;
BEGIN
    PERFORM FROM snowflake._narrow n WHERE n.seq = 0 FOR UPDATE;
    IF NOT FOUND THEN
        -- A snapshot older than the row (the window after an update that
        -- made it): the advisory key of OID 0, as the window's other locks.
        PERFORM pg_advisory_xact_lock(91560112816128);
    END IF;
    IF pos > coalesce(pg_sequence_last_value('snowflake._hw_narrow'::regclass), 0) THEN
        done := setval('snowflake._hw_narrow', pos, true);
    END IF;
END
$fn$;

-- _narrow_note records that p_seq issued through snowflake._hw_narrow, once
-- per session (the setting is rolled back with the transaction, so a
-- record that was rolled back is made again). A plain INSERT, no unique
-- index: nobody waits for another caller's open transaction.
-- SERIALIZABLE transactions skip it: reading the table there could make
-- them fail to serialise. Not for PUBLIC either.
CREATE OR REPLACE FUNCTION snowflake._narrow_note(p_seq regclass) RETURNS void
LANGUAGE plpgsql VOLATILE STRICT
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    memo text := 'snowflake._narrow_' || p_seq::oid::text;
BEGIN
    IF coalesce(current_setting(memo, true), '') <> ''
       OR current_setting('transaction_isolation') = 'serializable' THEN
        RETURN;
    END IF;
    INSERT INTO snowflake._narrow (seq)
    SELECT p_seq::oid WHERE NOT EXISTS (SELECT FROM snowflake._narrow n WHERE n.seq = p_seq::oid);
    PERFORM set_config(memo, 'on', false);
END
$fn$;

-- _s_pos is S's position as every path reads it: its last_value (none
-- when negative, see _issue) or the narrow store's, whichever is higher.
CREATE OR REPLACE FUNCTION snowflake._s_pos(seq regclass) RETURNS bigint
LANGUAGE sql VOLATILE STRICT
SET search_path = pg_catalog, pg_temp
AS $fn$
    SELECT greatest(
        (((greatest(coalesce(pg_sequence_last_value(seq), 0), 0) >> 22) & 2199023255551) << 12)
            | (greatest(coalesce(pg_sequence_last_value(seq), 0), 0) & 4095),
        coalesce(pg_sequence_last_value('snowflake._hw_narrow'::regclass), 0))
$fn$;

-- _store raises S to the snowflake id, or the narrow store to its
-- position when S cannot hold it. For _lease and _release, which hold S's
-- lock until their commit. The lock does not stop a client's setval, and
-- callers compare with a value of S read earlier: S is read again here
-- and never lowered, so a setval made meanwhile stands (a lease in
-- flight undid a client's setval ahead of the clock; regression).
CREATE OR REPLACE FUNCTION snowflake._store(seq regclass, id bigint) RETURNS void
LANGUAGE plpgsql VOLATILE STRICT
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    prm record;
    cur bigint;
    done bigint;
BEGIN
    prm := pg_sequence_parameters(seq);
    IF id BETWEEN prm.minimum_value AND prm.maximum_value THEN
        cur := greatest(pg_sequence_last_value(seq), 0);
        IF (((cur >> 22) & 2199023255551) << 12) | (cur & 4095)
           < (((id >> 22) & 2199023255551) << 12) | (id & 4095) THEN
            done := setval(seq, id, true);
        END IF;
    ELSE
        PERFORM snowflake._narrow_put((((id >> 22) & 2199023255551) << 12) | (id & 4095));
        PERFORM snowflake._narrow_note(seq);
    END IF;
END
$fn$;

-- _seq_lock takes seq's lock (sql/locks.sql) until the caller's commit,
-- while the window is open the advisory lock of the earlier code first,
-- and returns whether the window is open; without the lock's row it raises
-- the error whose hint names the repair. For _lease and _blocks, which run
-- as the installer.
CREATE OR REPLACE FUNCTION snowflake._seq_lock(seq regclass) RETURNS boolean
LANGUAGE plpgsql VOLATILE STRICT
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    in_window boolean;
BEGIN
    in_window := coalesce(pg_sequence_last_value('snowflake._lock_window_open'::regclass), 1) <> 0;
    IF in_window THEN
        PERFORM pg_advisory_xact_lock(91560112816128 | seq::oid::bigint);
    END IF;
    PERFORM FROM snowflake._locks l WHERE l.slot = (seq::oid::bigint % 1024)::integer FOR UPDATE;
    IF NOT FOUND AND NOT in_window THEN
        RAISE EXCEPTION 'snowflake._locks has no row %', seq::oid::bigint % 1024
            USING ERRCODE = 'internal_error', HINT = 'ALTER EXTENSION snowflake UPDATE makes the rows.';
    END IF;
    RETURN in_window;
END
$fn$;

-- _issue is the writing half of nextval: it runs as the installer, because
-- the built-in nextval needs only USAGE on the sequence while the shim must
-- setval it. It re-checks everything itself, so calling it directly grants
-- nothing: who must hold USAGE or UPDATE on seq, and the session user must
-- be who, be a member of who, or hold the privilege itself.
CREATE OR REPLACE FUNCTION snowflake._issue(seq regclass, who name) RETURNS bigint
LANGUAGE plpgsql VOLATILE STRICT SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    rname name;
    prm record;
    inc bigint;
    narrow boolean := false;
    s_own bigint;
    node_txt text;
    node integer;
    in_window boolean;
    hwname text;
    hw regclass;
    made bigint;
    seen text;
    memo text;
    step bigint;
    top bigint := 0;
    last bigint;
    now_ms bigint;
    ms bigint;
    cnt bigint;
    v bigint;
    done bigint;
    bk regclass;
    bd regclass;
    d bigint;
    bms bigint;
    bcnt bigint;
    rlive bigint;
    rmax bigint;
    got boolean := false;
    bstale text;
    reading_b boolean := false;
BEGIN
    -- Checks in the order of the extension's nextval. Plain function calls
    -- only for a sequence (no queries): this is the hot path of every shim
    -- call.
    -- A relation that does not exist (nextval(0)): relation_open's error,
    -- as in the extension. pg_relation_filenode is NULL only for such an
    -- OID and for relations without storage: the catalog is read only then.
    IF pg_relation_filenode(seq) IS NULL THEN
        IF NOT EXISTS (SELECT FROM pg_class c WHERE c.oid = seq) THEN
            RAISE EXCEPTION 'could not open relation with OID %', seq::oid
                USING ERRCODE = 'internal_error';
        END IF;
    END IF;
    -- has_sequence_privilege raises "is not a sequence" for any other
    -- relation, the extension's text in every PostgreSQL version (not
    -- pg_sequence_last_value: PostgreSQL 18 says "cannot open relation").
    IF NOT has_sequence_privilege(who, seq, 'USAGE, UPDATE')
       OR (who <> session_user
           AND NOT pg_has_role(session_user, who, 'MEMBER')
           AND NOT has_sequence_privilege(session_user, seq, 'USAGE, UPDATE')) THEN
        SELECT c.relname INTO rname FROM pg_class c WHERE c.oid = seq;
        RAISE EXCEPTION 'permission denied for sequence %', rname
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    IF current_setting('transaction_read_only') = 'on' THEN
        RAISE EXCEPTION 'cannot execute nextval() in a read-only transaction'
            USING ERRCODE = 'read_only_sql_transaction';
    END IF;
    node_txt := current_setting('snowflake.node', true);
    IF node_txt IS NULL OR node_txt = '' OR node_txt = '0' THEN
        RAISE EXCEPTION 'value for snowflake.node is not set'
            USING ERRCODE = 'config_file_error';
    END IF;
    node := node_txt::integer;
    IF node < 1 OR node > 1023 THEN
        RAISE EXCEPTION '% is outside the valid range for parameter "snowflake.node" (0 .. 1023)', node
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    hwname := '_hw_' || seq::oid::text || '_' || node::text;

    -- The lock (sql/locks.sql), while the window is open the advisory
    -- lock of the earlier code first. The sub-block is rolled back at its
    -- end, which releases both; plpgsql variables keep their values, and
    -- settings made in it would be undone, so they are made after it.
    in_window := coalesce(pg_sequence_last_value('snowflake._lock_window_open'::regclass), 1) <> 0;
    BEGIN
        IF in_window THEN
            PERFORM pg_advisory_xact_lock(91560112816128 | seq::oid::bigint); -- x'5346'::bigint << 32
        END IF;
        PERFORM FROM snowflake._locks l WHERE l.slot = (seq::oid::bigint % 1024)::integer FOR UPDATE;
        IF NOT FOUND AND NOT in_window THEN
            -- A snapshot older than the rows: the shim was installed after
            -- this transaction took it (sql/locks.sql). Its next try sees
            -- them.
            IF current_setting('transaction_isolation') <> 'read committed' THEN
                RAISE EXCEPTION 'could not serialize access: this transaction''s snapshot predates the snowflake shim'
                    USING ERRCODE = 'serialization_failure', HINT = 'Retry the transaction.';
            END IF;
            RAISE EXCEPTION 'snowflake._locks has no row %', seq::oid::bigint % 1024
                USING ERRCODE = 'internal_error', HINT = 'ALTER EXTENSION snowflake UPDATE makes the rows.';
        END IF;

        -- H, the top of this node's leases, and B and R, this node's blocks
        -- of the per-row path (docs/state-model.md, "Blocks"). to_regclass answers
        -- from the catalog caches, which a transaction that already holds
        -- all its locks does not refresh: it can miss an H or a B created
        -- since (and a call must not issue one ID above a live block that
        -- its session would later draw below). Under the lock, a _hw_count
        -- that moved since this session last missed one of them means one
        -- may have been committed meanwhile; a name lookup that asks for a
        -- lock processes every pending invalidation when it finds nothing,
        -- and to_regclass then sees what was committed. The session
        -- remembers the count it checked, so this costs one lookup per new
        -- H or B, and nothing in a database where none was ever made.
        hw := to_regclass('snowflake.' || hwname);
        bk := to_regclass('snowflake._blk_' || seq::oid::text || '_' || node::text);
        IF hw IS NULL OR bk IS NULL THEN
            made := pg_sequence_last_value('snowflake._hw_count'::regclass);
            seen := 'snowflake._hw_seen_' || seq::oid::text || '_' || node::text;
            IF made IS NOT NULL AND current_setting(seen, true) IS DISTINCT FROM made::text THEN
                BEGIN
                    EXECUTE 'SELECT FROM snowflake.'
                        || CASE WHEN hw IS NULL THEN hwname ELSE '_blk_' || seq::oid::text || '_' || node::text END;
                EXCEPTION WHEN undefined_table THEN
                    NULL;
                END;
                hw := to_regclass('snowflake.' || hwname);
                bk := to_regclass('snowflake._blk_' || seq::oid::text || '_' || node::text);
                IF hw IS NULL OR bk IS NULL THEN
                    memo := made::text;
                END IF;
            END IF;
        END IF;
        IF hw IS NOT NULL THEN
            top := coalesce(pg_sequence_last_value(hw), 0);
            top := (((top >> 22) & 2199023255551) << 12) | (top & 4095);
        END IF;
        IF bk IS NOT NULL THEN
            bd := to_regclass('snowflake._blkd_' || seq::oid::text || '_' || node::text);
        END IF;
        IF bd IS NOT NULL THEN
            -- R: the live block's start, NULL while none is (a lease ended
            -- it, leaving R uncalled); rmax, where the highest block starts,
            -- also then. Under the lock neither changes.
            rlive := pg_sequence_last_value(bd);
            rmax := rlive;
            IF rmax IS NULL THEN
                EXECUTE format('SELECT last_value FROM %s', bd) INTO rmax;
            END IF;
            -- Made with a DDL and not yet enabled (docs/state-model.md,
            -- "Blocks made with the DDL"): enabled here once that DDL has
            -- committed; in its own transaction, no block.
            IF rmax < 0 THEN
                IF snowflake._blk_enable(bd) THEN
                    rmax := 0;
                ELSE
                    bk := NULL;
                    bd := NULL;
                END IF;
            END IF;
        END IF;

        -- S, or what the narrow store holds above it (_narrow_put): _s_pos,
        -- written out so that S is read once per call. A negative
        -- last_value (a descending sequence's start) is no snowflake: the
        -- extension would read its bits as millisecond 2^41-1 and issue
        -- IDs dated 2092.
        last := greatest(coalesce(pg_sequence_last_value(seq), 0), 0);
        s_own := (((last >> 22) & 2199023255551) << 12) | (last & 4095);
        -- S's parameters, read after S: its first lock in this transaction,
        -- just taken, made the session process catalog invalidations, so
        -- they are those of the S read, also when a lease widened S while
        -- this call waited for the lock (read before, the old MAXVALUE
        -- against the new value raised "outside its bounds"; regression).
        -- A later ALTER SEQUENCE waits for this transaction's lock on S.
        prm := pg_sequence_parameters(seq);
        inc := prm.increment;
        IF inc < 1 THEN
            -- The extension adds a negative increment to the 12-bit count,
            -- which wraps below 0: the next millisecond, count 0. Where it
            -- would not wrap (a count above 0 that another path left) it
            -- would go back; this never does.
            inc := 4096;
        END IF;
        last := greatest(s_own, coalesce(pg_sequence_last_value('snowflake._hw_narrow'::regclass), 0));
        now_ms := floor(date_part('epoch', clock_timestamp()) * 1000)::bigint - 1672531200000;
        IF bd IS NOT NULL AND prm.increment = 1 THEN
            -- The live block, when it is this node's, not behind the clock
            -- and not used up: its next ID. Nothing else to write, it was
            -- reserved when it was made.
            d := coalesce(rlive, 0);
            IF d > 0 AND ((d >> 12) & 1023) = node AND (d >> 22) >= now_ms THEN
                v := nextval(bk);
                got := v - d BETWEEN 0 AND 1023;
            END IF;
        END IF;
        ms := last >> 12;
        cnt := last & 4095;
        IF got THEN
            NULL;
        ELSIF (top >> 12) > greatest(now_ms, ms) + 5 THEN
            -- A lease of this node reaches well past the clock and S: the
            -- counts 3072 .. 4095, which the generator never issues, above S
            -- and dated at the clock.
            IF now_ms > ms THEN
                ms := now_ms;
                cnt := 3072;
            ELSIF cnt < 3072 THEN
                cnt := 3072;
            ELSIF inc > 4095 - cnt THEN
                ms := ms + 1;
                cnt := 3072;
            ELSE
                cnt := cnt + inc;
            END IF;
        ELSE
            -- Every lease of this node ends before now, or at most a few ms
            -- after it: the pgEdge rule above S and the leases' top.
            IF top > last THEN
                ms := top >> 12;
                cnt := top & 4095;
            END IF;
            IF now_ms > ms THEN
                ms := now_ms;
                cnt := 0;
            ELSIF inc > 4095 - cnt THEN
                ms := ms + 1;
                cnt := 0;
            ELSE
                cnt := cnt + inc;
            END IF;
        END IF;
        IF NOT got THEN
            d := NULL;
            IF bd IS NOT NULL AND prm.increment = 1 THEN
                -- A new block [cnt, cnt + 1023], issued here as its top,
                -- unless it would lie below R, the highest block made so far
                -- (S set into the past below a block dated ahead): B must not
                -- go back below a block a call may still hold R of. Nor more
                -- than 5 ms ahead of the clock: a block takes the rest of
                -- its millisecond's counts, so blocks made one after the
                -- other (two nodes in turn, or more calls than counts)
                -- would date the IDs further and further ahead
                -- (docs/state-model.md, "Blocks"). Then one ID.
                bms := ms;
                bcnt := cnt;
                IF bcnt > 3072 THEN
                    bms := ms + 1;
                    bcnt := CASE WHEN (top >> 12) > greatest(now_ms, last >> 12) + 5 THEN 3072 ELSE 0 END;
                END IF;
                d := (bms << 22) | (node::bigint << 12) | bcnt;
                IF d > rmax AND bms <= now_ms + 5 THEN
                    ms := bms;
                    cnt := bcnt + 1023;
                ELSE
                    d := NULL;
                END IF;
            END IF;
            v := (ms << 22) | (node::bigint << 12) | cnt;
            IF v BETWEEN prm.minimum_value AND prm.maximum_value THEN
                -- As _store: a client's setval made since S was read
                -- stands.
                done := greatest(pg_sequence_last_value(seq), 0);
                IF (((done >> 22) & 2199023255551) << 12) | (done & 4095) < (ms << 12) | cnt THEN
                    done := setval(seq, v, true);
                END IF;
            ELSE
                -- The narrow store is the database's, read by every
                -- sequence: a position far ahead would date everyone's IDs
                -- there. S's own value is far ahead where the ID does not
                -- fit only for bounds made for it (a MAXVALUE that is a
                -- future snowflake, reached), which any role may give its
                -- own temporary sequence (regression). A store ahead of
                -- the clock (a lease's top, while leases raise S) is not
                -- this sequence's doing.
                IF (s_own >> 12) > now_ms + 100 THEN
                    SELECT c.relname INTO rname FROM pg_class c WHERE c.oid = seq;
                    RAISE EXCEPTION 'nextval: the next ID of sequence "%" lies outside its bounds, % ms ahead of the clock', rname, (s_own >> 12) - now_ms
                        USING ERRCODE = 'sequence_generator_limit_exceeded',
                              HINT = 'IDs outside a sequence''s bounds are kept in a store the whole database reads, which takes none dated more than 100 ms ahead; ALTER SEQUENCE ... AS bigint MINVALUE 1 NO MAXVALUE lets the sequence hold them.';
                END IF;
                PERFORM snowflake._narrow_put((ms << 12) | cnt);
                narrow := true;
            END IF;
            IF hw IS NOT NULL AND ((ms << 12) | cnt) > top THEN
                -- Above the leases: H records it too. S alone would not keep
                -- it: a setval into the past or a RESTART lowers S, and the
                -- node's next lease, starting at an unmoved H, would then
                -- issue these positions again (regression).
                done := setval(hw, v, true);
            END IF;
            IF d IS NOT NULL THEN
                -- B before R: a call that reads this block draws after it.
                -- B's session value is the ID returned (currval).
                done := setval(bk, d, true);
                done := setval(bd, d, true);
                v := d;
            ELSIF bk IS NOT NULL AND (bd IS NULL OR v > rmax) THEN
                -- One ID with B there, above every block: B keeps it as the
                -- session's value for currval, and the values B hands out
                -- after it lie above every block, so no call takes them.
                done := setval(bk, v, true);
            ELSIF bk IS NOT NULL THEN
                -- Below R (S set into the past below a block dated ahead)
                -- B and R stay. B's session value, if any, is
                -- then older than v but may be larger (a draw refused just
                -- before): noted, so that currval passes over it until the
                -- session draws from B again (_blk_currval; regression).
                reading_b := true;
                bstale := currval(bk)::text;
                reading_b := false;
            END IF;
        END IF;
        RAISE SQLSTATE 'SFUNL';
    EXCEPTION WHEN SQLSTATE 'SFUNL' THEN
        NULL;
    WHEN object_not_in_prerequisite_state THEN
        -- From currval(bk) above, the last statement of the block: this
        -- session has no value of B. Anything else is an error.
        IF NOT reading_b THEN
            RAISE;
        END IF;
    END;
    IF bstale IS NOT NULL THEN
        PERFORM set_config('snowflake._blk_stale_' || seq::oid::text || '_' || node::text, bstale, false);
    END IF;
    IF memo IS NOT NULL THEN
        PERFORM set_config(seen, memo, false);
    END IF;
    IF narrow THEN
        PERFORM snowflake._narrow_note(seq);
    END IF;
    IF in_window THEN
        -- At most once a second per session: a step reads pg_locks.
        step := nullif(current_setting('snowflake._lock_step_ms', true), '')::bigint;
        IF step IS NULL OR now_ms - step >= 1000 OR now_ms < step THEN
            PERFORM set_config('snowflake._lock_step_ms', now_ms::text, false);
            PERFORM snowflake._lock_window_step();
        END IF;
    END IF;
    RETURN v;
END
$fn$;

-- _blk and _blkd name B(S,N) and R(S,N), the block sequences of the
-- per-row path for the session's node N (docs/state-model.md, "Blocks"),
-- NULL while they do not exist or snowflake.node is no node; _blk_node is
-- the setting's text they were looked up for. IMMUTABLE on purpose: with a
-- constant argument (a column default, a literal) the planner evaluates
-- them once and the plan holds the two relations and the text, which
-- makes it depend on the relations; a plan made before they existed keeps
-- NULL and the slow path until it is made again, and a plan made under
-- another setting fails nextval's comparison of the text. PL/pgSQL, not
-- SQL: the planner folds a call by running it, and a SQL function run
-- that way is parsed and planned again at every call (five per planning
-- of an inlined nextval), where PL/pgSQL keeps its compiled body in the
-- session. Every name in the body is qualified, as in an inlined one.
CREATE OR REPLACE FUNCTION snowflake._blk_node() RETURNS text
LANGUAGE plpgsql IMMUTABLE
AS $fn$BEGIN
    RETURN pg_catalog.current_setting('snowflake.node', true);
END$fn$;

-- _blk_name is the name of seq's block sequence of the kind ('_blk_' or
-- '_blkd_') for the session's node, NULL when snowflake.node is no node.
CREATE OR REPLACE FUNCTION snowflake._blk_name(regclass, text) RETURNS text
LANGUAGE plpgsql IMMUTABLE STRICT
AS $fn$
DECLARE
    node text := pg_catalog.current_setting('snowflake.node', true);
BEGIN
    IF node OPERATOR(pg_catalog.!~) '^[0-9]{1,4}$'
       OR node::pg_catalog.int4 OPERATOR(pg_catalog.<) 1 OR node::pg_catalog.int4 OPERATOR(pg_catalog.>) 1023 THEN
        RETURN NULL;
    END IF;
    RETURN 'snowflake.' OPERATOR(pg_catalog.||) $2 OPERATOR(pg_catalog.||) $1::pg_catalog.oid::pg_catalog.text
        OPERATOR(pg_catalog.||) '_' OPERATOR(pg_catalog.||) node::pg_catalog.int4::pg_catalog.text;
END
$fn$;

CREATE OR REPLACE FUNCTION snowflake._blk(regclass) RETURNS regclass
LANGUAGE plpgsql IMMUTABLE STRICT
AS $fn$BEGIN
    RETURN pg_catalog.to_regclass(snowflake._blk_name($1, '_blk_'));
END$fn$;

CREATE OR REPLACE FUNCTION snowflake._blkd(regclass) RETURNS regclass
LANGUAGE plpgsql IMMUTABLE STRICT
AS $fn$BEGIN
    RETURN pg_catalog.to_regclass(snowflake._blk_name($1, '_blkd_'));
END$fn$;

-- _blk_public is true when PUBLIC may use seq (USAGE or UPDATE, as the
-- built-in nextval asks), so that every role may: IMMUTABLE like _blk, so
-- that the planner folds nextval's privilege test away for such a
-- sequence (docs/state-model.md, "The privilege test"). The plan stays
-- valid only while the grant does: a GRANT or REVOKE on seq invalidates
-- every plan that names it. False, not an error, for a relation that is
-- no sequence: the call's own test raises the extension's error then.
CREATE OR REPLACE FUNCTION snowflake._blk_public(regclass) RETURNS boolean
LANGUAGE plpgsql IMMUTABLE STRICT
AS $fn$BEGIN
    IF NOT EXISTS (SELECT FROM pg_catalog.pg_class c
                   WHERE c.oid OPERATOR(pg_catalog.=) $1::pg_catalog.oid
                     AND c.relkind OPERATOR(pg_catalog.=) 'S') THEN
        RETURN false;
    END IF;
    RETURN pg_catalog.has_sequence_privilege('public', $1, 'USAGE, UPDATE');
END$fn$;

-- _now_ms was the clock of an earlier nextval; the clock test is now the
-- comparison with to_timestamp below, which costs less per call than
-- date_part.
IF to_regprocedure('snowflake._now_ms()') IS NOT NULL THEN
    DROP FUNCTION snowflake._now_ms();
END IF;

-- _nextval_slow is the nextval of the rules (_issue): it runs as the
-- caller, so that the privilege check uses current_user as the built-in
-- nextval does, and records the session's currval.
CREATE OR REPLACE FUNCTION snowflake._nextval_slow(regclass) RETURNS bigint
LANGUAGE plpgsql VOLATILE STRICT
AS $fn$
DECLARE
    v bigint;
    t text;
BEGIN
    v := snowflake._issue($1, current_user);
    t := pg_catalog.set_config('snowflake.currval_' || $1::oid::text, v::text, false);
    RETURN v;
END
$fn$;

-- nextval takes the next ID of the live block of the sequence and the
-- session's node with native sequence calls when the caller may use the
-- sequence, the session's snowflake.node reads as the text the plan was
-- made for and the block is not behind the clock, and runs _nextval_slow
-- otherwise (docs/state-model.md, "Blocks"), which checks everything the
-- extension does and raises its errors. The planner drops the privilege
-- test where PUBLIC may use the sequence (_blk_public); _blk_public comes
-- second in the OR so that a plan that cannot fold it (the sequence a
-- parameter of a generic plan) runs it only for a caller without the
-- privilege. A SQL expression without SET clauses, not STRICT, so that
-- the planner inlines it: AND stops at its first false operand (no draw
-- without the privilege, nor from another node's block), and R is read
-- before B is drawn (operands are evaluated left to right). Operators are schema-qualified: an inlined body
-- resolves names in the caller's search_path. No test of the ID's node
-- bits: B(S,N) holds only node N's IDs. The clock test is floor(now in
-- ms) <= the ID's millisecond, written as now < the start of the ID's
-- next millisecond: to_timestamp of an exact count of ms over 1000 rounds
-- to that instant to the microsecond, and a timestamp comparison costs
-- less than turning the clock into ms. B does not exist for a relation
-- that is not a sequence; the planner folds _blk, _blkd and _blk_node
-- (see above), and NULL sends the call to _nextval_slow. The COALESCE is
-- for a plan that found B but not R (the two are looked up one after the
-- other): the planner folds a strict operator with a NULL operand to
-- NULL, dropping the draw of B, and moves a NULL operand of AND to its
-- end, so the currval(B) after it would run without a draw; false ends
-- the AND instead.
CREATE OR REPLACE FUNCTION snowflake.nextval(regclass DEFAULT 'snowflake.id_seq'::regclass) RETURNS bigint
LANGUAGE sql VOLATILE
AS $fn$SELECT CASE
    WHEN (pg_catalog.has_sequence_privilege($1, 'USAGE') OR snowflake._blk_public($1))
     AND COALESCE(pg_catalog.current_setting('snowflake.node', true) OPERATOR(pg_catalog.=) snowflake._blk_node(), false)
     AND COALESCE(((OPERATOR(pg_catalog.-) pg_catalog.pg_sequence_last_value(snowflake._blkd($1))
           OPERATOR(pg_catalog.+) pg_catalog.nextval(snowflake._blk($1)))
          OPERATOR(pg_catalog.>>) 10) OPERATOR(pg_catalog.=) 0, false)
     AND pg_catalog.clock_timestamp() OPERATOR(pg_catalog.<) pg_catalog.to_timestamp(
          ((pg_catalog.currval(snowflake._blk($1)) OPERATOR(pg_catalog.>>) 22) OPERATOR(pg_catalog.+) 1672531200001)::pg_catalog.float8
          OPERATOR(pg_catalog./) 1000)
    THEN pg_catalog.currval(snowflake._blk($1))
    ELSE snowflake._nextval_slow($1) END$fn$;

-- _blk_currval is the session's latest value of the B(seq, N) of every
-- node N (a session may change its node): the last ID this session took
-- from a block or, while B exists, from the slow path; NULL without. A
-- value drawn and refused by nextval is followed by the slow path, which
-- leaves B's session value at the ID it issues, or notes the value stale
-- when it leaves B alone (_issue). The IDs of a session increase, so the
-- largest is the latest.
CREATE OR REPLACE FUNCTION snowflake._blk_currval(seq regclass) RETURNS bigint
LANGUAGE plpgsql VOLATILE STRICT
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    b record;
    v bigint;
    latest bigint;
BEGIN
    FOR b IN SELECT c.oid::regclass AS bk, (regexp_match(c.relname, '_([0-9]+)$'))[1] AS node
             FROM pg_class c
             WHERE c.relnamespace = 'snowflake'::regnamespace AND c.relkind = 'S'
               AND c.relname LIKE '\_blk\_' || seq::oid::text || '\_%'
               AND c.relname ~ ('^_blk_' || seq::oid::text || '_[0-9]+$') LOOP
        BEGIN
            v := currval(b.bk);
        EXCEPTION WHEN object_not_in_prerequisite_state THEN
            CONTINUE;
        END;
        -- A slow-path call left B alone after this value (_issue): the ID
        -- it returned, in the session's currval setting, is the later one.
        IF v::text IS DISTINCT FROM current_setting('snowflake._blk_stale_' || seq::oid::text || '_' || b.node, true) THEN
            latest := greatest(latest, v);
        END IF;
    END LOOP;
    RETURN latest;
END
$fn$;

-- _blk_make creates B(seq, node) and R(seq, node), R uncalled at r_start,
-- with what PUBLIC may do with them (_private), in the caller's
-- transaction: for _blocks and _blocks_at_ddl, which run as the installer
-- and decide when. No catalog notification for these (events.sql,
-- _ddl_notify): they change nothing the proxies cache. B cycles: drawing
-- it by hand to its end must not make it fail.
CREATE OR REPLACE FUNCTION snowflake._blk_make(seq regclass, node integer, r_start bigint) RETURNS void
LANGUAGE plpgsql VOLATILE STRICT
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    bname text := '_blk_' || seq::oid::text || '_' || node::text;
    dname text := '_blkd_' || seq::oid::text || '_' || node::text;
BEGIN
    PERFORM set_config('snowflake._blocks_ddl', 'on', true);
    EXECUTE format('CREATE SEQUENCE IF NOT EXISTS snowflake.%I AS bigint MINVALUE 0 START 0 CYCLE', bname);
    EXECUTE format('CREATE SEQUENCE IF NOT EXISTS snowflake.%I AS bigint MINVALUE %s START %s NO CYCLE',
                   dname, least(r_start, 0), r_start);
    PERFORM snowflake._private(('snowflake.' || quote_ident(bname))::regclass, 'USAGE');
    PERFORM snowflake._private(('snowflake.' || quote_ident(dname))::regclass, 'SELECT');
    PERFORM set_config('snowflake._blocks_ddl', '', true);
END
$fn$;

-- _blk_shared_start is where the one pair of block sequences that shims
-- before per-node blocks kept for the sequence seq_oid had its last block
-- (its R), 0 without: where each R(seq, node) starts, so that no block is
-- made below it (docs/state-model.md, "From one B per sequence to one per
-- node").
CREATE OR REPLACE FUNCTION snowflake._blk_shared_start(seq_oid oid) RETURNS bigint
LANGUAGE plpgsql VOLATILE STRICT
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    shared regclass := to_regclass('snowflake._blkd_' || seq_oid::text);
    start bigint;
BEGIN
    IF shared IS NOT NULL THEN
        EXECUTE format('SELECT last_value FROM %s', shared) INTO start;
    END IF;
    RETURN greatest(coalesce(start, 0), 0);
END
$fn$;

-- _blocks makes B(seq, node) and R(seq, node) in the caller's
-- transaction, which should commit at once: the proxy calls it on its
-- control connection, _lease in its own. Only a role that may setval seq
-- may: until the commit, others making them wait for it. R starts where
-- the sequence's one pair of earlier shims had its last block
-- (docs/state-model.md, "From one B per sequence to one per node").
-- Advances _hw_count, so that slow-path calls that did not find B look
-- again (_issue), and holds the lock until the commit, as _lease does for
-- H: a commit is visible to others before its catalog invalidations are
-- sent, and in that window a session whose caches hold B's name as
-- missing did not find it, while calls of other sessions already drew
-- from its first block, and issued one ID above that live block; its next
-- statement, planned with B, drew a smaller one (regression). A call
-- waiting for the lock goes on only after the invalidations are out.
-- Returns whether it made them.
IF to_regprocedure('snowflake._blocks(regclass)') IS NOT NULL THEN
    DROP FUNCTION snowflake._blocks(regclass);
END IF;
CREATE OR REPLACE FUNCTION snowflake._blocks(seq regclass, node integer) RETURNS boolean
LANGUAGE plpgsql VOLATILE STRICT SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    bname text := '_blk_' || seq::oid::text || '_' || node::text;
    dname text := '_blkd_' || seq::oid::text || '_' || node::text;
    start bigint;
    done bigint;
BEGIN
    IF (SELECT c.relkind FROM pg_class c WHERE c.oid = seq) IS DISTINCT FROM 'S' OR node NOT BETWEEN 1 AND 1023 THEN
        RETURN false;
    END IF;
    IF NOT has_sequence_privilege(session_user, seq, 'UPDATE') THEN
        RAISE EXCEPTION 'permission denied for sequence %', seq
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    IF to_regclass('snowflake.' || bname) IS NOT NULL AND to_regclass('snowflake.' || dname) IS NOT NULL THEN
        -- Made with a DDL and not yet enabled: enabled under the lock.
        EXECUTE format('SELECT last_value FROM snowflake.%I', dname) INTO start;
        IF start >= 0 THEN
            RETURN false;
        END IF;
        PERFORM snowflake._seq_lock(seq);
        RETURN snowflake._blk_enable(('snowflake.' || quote_ident(dname))::regclass);
    END IF;
    PERFORM snowflake._seq_lock(seq);
    BEGIN
        PERFORM snowflake._blk_make(seq, node, 0);
    EXCEPTION WHEN unique_violation OR duplicate_table OR duplicate_object THEN
        -- Made at the same time by another caller (a lease and the
        -- proxy's catalog watch), who committed first. duplicate_object:
        -- a catalog cache that does not show the other's relation yet
        -- finds its row type (regression: the lease failed).
        RETURN false;
    END;
    start := snowflake._blk_shared_start(seq::oid);
    IF start > 0 THEN
        done := setval(('snowflake.' || quote_ident(dname))::regclass, start, false);
    END IF;
    done := nextval('snowflake._hw_count');
    RETURN true;
END
$fn$;

-- _blk_enable enables R(seq, node), rd, made with a DDL
-- (docs/state-model.md, "Blocks made with the DDL"): R uncalled at -(x +
-- 1), x the DDL's transaction, no block may be made in it until x has
-- committed and a caller under the lock has advanced _hw_count, so that a
-- session that missed B looks again. For callers that hold seq's lock:
-- _issue and _blocks. R then starts where the sequence's one pair of
-- earlier shims had its last block, as _blocks makes it. Returns whether
-- rd is enabled; false while x is in progress (the caller's own
-- transaction: no other sees R).
CREATE OR REPLACE FUNCTION snowflake._blk_enable(rd regclass) RETURNS boolean
LANGUAGE plpgsql VOLATILE STRICT
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    lv bigint;
    done bigint;
BEGIN
    EXECUTE format('SELECT last_value FROM %s', rd) INTO lv;
    IF lv >= 0 THEN
        RETURN true;
    END IF;
    -- NULL: older than the status PostgreSQL keeps, long committed (an
    -- aborted x left no R to see).
    IF coalesce(pg_xact_status((-lv - 1)::text::xid8), 'committed') <> 'committed' THEN
        RETURN false;
    END IF;
    done := setval(rd, snowflake._blk_shared_start((regexp_match(rd::text, '_blkd_([0-9]+)_'))[1]::oid), false);
    done := nextval('snowflake._hw_count');
    RETURN true;
END
$fn$;

-- _blocks_at_ddl makes B(seq, node) and R(seq, node) in the caller's
-- transaction, R not yet enabled (_blk_enable): for the event trigger
-- that sees a DDL name seq in a snowflake.nextval default, so that the
-- first statement after it is planned with them. No lock and no
-- _hw_count: the DDL's transaction may last long. Only a role that may
-- setval seq may, as for _blocks. Returns whether it made them.
CREATE OR REPLACE FUNCTION snowflake._blocks_at_ddl(seq regclass, node integer) RETURNS boolean
LANGUAGE plpgsql VOLATILE STRICT SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    bname text := '_blk_' || seq::oid::text || '_' || node::text;
    dname text := '_blkd_' || seq::oid::text || '_' || node::text;
BEGIN
    IF (SELECT c.relkind FROM pg_class c WHERE c.oid = seq) IS DISTINCT FROM 'S' OR node NOT BETWEEN 1 AND 1023
       OR NOT has_sequence_privilege(session_user, seq, 'UPDATE')
       OR to_regclass('snowflake.' || bname) IS NOT NULL OR to_regclass('snowflake.' || dname) IS NOT NULL THEN
        RETURN false;
    END IF;
    PERFORM snowflake._blk_make(seq, node, -(pg_current_xact_id()::text::bigint) - 1);
    RETURN true;
END
$fn$;

-- _drop_shared_blocks ends the block of the one pair of block sequences
-- that shims before per-node blocks kept for the sequence seq_oid (its R
-- uncalled: a plan still holding the pair calls the slow path) and drops
-- the pair unless a transaction holds it (a lock timeout: the next call
-- tries again). For _blocks_all, which a proxy's control role runs; the
-- pair is the installer's. Any role may call it: the pair serves nothing
-- any more.
CREATE OR REPLACE FUNCTION snowflake._drop_shared_blocks(seq_oid oid) RETURNS void
LANGUAGE plpgsql VOLATILE STRICT SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    shared regclass := to_regclass('snowflake._blkd_' || seq_oid::text);
    live bigint;
    lt text := current_setting('lock_timeout');
BEGIN
    IF shared IS NOT NULL THEN
        live := pg_sequence_last_value(shared);
        IF live IS NOT NULL THEN
            PERFORM setval(shared, live, false);
        END IF;
    END IF;
    BEGIN
        PERFORM set_config('lock_timeout', '100ms', true);
        EXECUTE format('DROP SEQUENCE IF EXISTS snowflake.%I, snowflake.%I',
                       '_blk_' || seq_oid::text, '_blkd_' || seq_oid::text);
    EXCEPTION WHEN lock_not_available THEN
        NULL;
    END;
    PERFORM set_config('lock_timeout', lt, true);
END
$fn$;

-- _drop_leftovers drops the H and block sequences named for a relation OID
-- that does not exist, in the caller's view: for the drop trigger
-- (events.sql, _ddl_drop), which runs as the role that dropped the
-- sequence, which may not drop these (they are the installer's: a
-- sequence's owner who was no superuser could not drop it, regression),
-- and for _blocks_all. Any role may call it; a sequence that exists keeps
-- them.
CREATE OR REPLACE FUNCTION snowflake._drop_leftovers(seq_oid oid) RETURNS void
LANGUAGE plpgsql VOLATILE STRICT SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    h record;
BEGIN
    IF EXISTS (SELECT FROM pg_class c WHERE c.oid = seq_oid) THEN
        RETURN;
    END IF;
    FOR h IN SELECT c.relname FROM pg_class c
             WHERE c.relnamespace = 'snowflake'::regnamespace AND c.relkind = 'S'
               AND (c.relname LIKE '\_hw\_' || seq_oid::text || '\_%'
                    OR (c.relname LIKE '\_blk%' AND c.relname ~ ('^_blkd?_' || seq_oid::text || '(_[0-9]+)?$'))) LOOP
        EXECUTE format('DROP SEQUENCE IF EXISTS snowflake.%I', h.relname);
    END LOOP;
END
$fn$;

-- _blk_nodes are the nodes blocks are made for: node (a proxy's; NULL:
-- none), the session's snowflake.node and every node the database's or a
-- role's settings give it.
CREATE OR REPLACE FUNCTION snowflake._blk_nodes(node integer) RETURNS integer[]
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $fn$
    SELECT array_agg(DISTINCT x.m)
    FROM (SELECT node AS m
          UNION ALL
          SELECT substring(current_setting('snowflake.node', true) FROM '^[0-9]{1,4}$')::integer
          UNION ALL
          SELECT substring(cfg FROM '^snowflake\.node=([0-9]{1,4})$')::integer
          FROM pg_db_role_setting d, unnest(d.setconfig) AS cfg
          WHERE d.setdatabase IN (0, (SELECT b.oid FROM pg_database b WHERE b.datname = current_database()))) x
    WHERE x.m BETWEEN 1 AND 1023
$fn$;

-- _blocks_all makes the blocks of snowflake.id_seq and of every sequence
-- named in a snowflake.nextval column default that has none and that the
-- caller may setval, for node (the proxy's; NULL: none), the session's
-- snowflake.node and every node the database's or a role's settings give
-- it (docs/state-model.md, "Blocks"); it drops those of sequences that are
-- gone, and the one pair per sequence of earlier shims. The proxy calls it
-- on its catalog watch. Returns how many pairs it made.
IF to_regprocedure('snowflake._blocks_all()') IS NOT NULL THEN
    DROP FUNCTION snowflake._blocks_all();
END IF;
CREATE OR REPLACE FUNCTION snowflake._blocks_all(node integer) RETURNS integer
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    r record;
    nodes integer[];
    m integer;
    n integer := 0;
BEGIN
    IF NOT has_function_privilege('snowflake._blocks(regclass, integer)', 'EXECUTE') THEN
        RETURN 0; -- not a proxy's role (see "Privileges" below)
    END IF;
    nodes := snowflake._blk_nodes(node);
    -- In the order of the lock rows (_blocks takes each sequence's), so
    -- that two callers making blocks at once (two proxies' watches) cannot
    -- deadlock.
    FOR r IN
        SELECT x.seq FROM (
            SELECT s.oid::regclass AS seq
            FROM pg_depend f
            JOIN pg_depend q ON q.classid = f.classid AND q.objid = f.objid
            JOIN pg_class s ON s.oid = q.refobjid AND s.relkind = 'S'
            WHERE f.classid = 'pg_attrdef'::regclass AND f.refclassid = 'pg_proc'::regclass
              AND f.refobjid = 'snowflake.nextval(regclass)'::regprocedure
              AND q.refclassid = 'pg_class'::regclass
            UNION
            SELECT 'snowflake.id_seq'::regclass) x
        ORDER BY x.seq::oid::bigint % 1024, x.seq::oid
    LOOP
        IF has_sequence_privilege(session_user, r.seq, 'UPDATE') THEN
            FOREACH m IN ARRAY coalesce(nodes, '{}') LOOP
                IF snowflake._blocks(r.seq, m) THEN
                    n := n + 1;
                END IF;
            END LOOP;
        END IF;
    END LOOP;
    -- Block and H sequences of sequences that no longer exist: the drop
    -- trigger removes them, but only a superuser's install has it, and no
    -- trigger fires when a session's temporary sequences go with it (whose
    -- defaults this made blocks for). Of those that exist, the pair of an
    -- earlier shim (shared: no node in the name).
    FOR r IN
        SELECT (regexp_match(c.relname, '^_(?:blk|blkd|hw)_([0-9]+)'))[1]::oid AS o,
               bool_or(c.relname ~ '^_blkd?_[0-9]+$') AS shared
        FROM pg_class c
        WHERE c.relnamespace = 'snowflake'::regnamespace AND c.relkind = 'S'
          AND c.relname ~ '^_(blk|blkd|hw)_[0-9]+'
        GROUP BY 1
    LOOP
        IF NOT EXISTS (SELECT FROM pg_class c WHERE c.oid = r.o) THEN
            PERFORM snowflake._drop_leftovers(r.o);
        ELSIF r.shared THEN
            PERFORM snowflake._drop_shared_blocks(r.o);
        END IF;
    END LOOP;
    RETURN n;
END
$fn$;

-- _currval_check raises the errors of the extension's currval for seq.
CREATE OR REPLACE FUNCTION snowflake._currval_check(seq regclass, val bigint) RETURNS bigint
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $fn$
BEGIN
    -- As in _issue: a relation that does not exist, then "is not a
    -- sequence" from has_sequence_privilege, then "permission
    -- denied for sequence" without SELECT or USAGE (for the caller: this is
    -- not SECURITY DEFINER), with the extension's texts in every PostgreSQL
    -- version (regression: pg_sequence_last_value, which raised both up to
    -- PostgreSQL 17, returns NULL without privileges in 18, so currval
    -- answered a role without any).
    IF pg_relation_filenode(seq) IS NULL THEN
        IF NOT EXISTS (SELECT FROM pg_class c WHERE c.oid = seq) THEN
            RAISE EXCEPTION 'could not open relation with OID %', seq::oid
                USING ERRCODE = 'internal_error';
        END IF;
    END IF;
    IF NOT has_sequence_privilege(seq, 'SELECT, USAGE') THEN
        RAISE EXCEPTION 'permission denied for sequence %',
            (SELECT c.relname FROM pg_class c WHERE c.oid = seq)
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    IF val IS NULL THEN
        RAISE EXCEPTION 'currval of sequence "%" is not yet defined in this session',
            (SELECT c.relname FROM pg_class c WHERE c.oid = seq)
            USING ERRCODE = 'object_not_in_prerequisite_state';
    END IF;
    RETURN val;
END
$fn$;

-- currval returns this session's latest shim value for the sequence.
CREATE OR REPLACE FUNCTION snowflake.currval(regclass DEFAULT 'snowflake.id_seq'::regclass) RETURNS bigint
LANGUAGE plpgsql VOLATILE STRICT
AS $fn$
BEGIN
    RETURN snowflake._currval_check($1, greatest(
        nullif(pg_catalog.current_setting('snowflake.currval_' || $1::oid::text, true), '')::bigint,
        snowflake._blk_currval($1)));
END
$fn$;

-- _currval is what the proxy sends in place of snowflake.currval (see
-- plan.CurrvalFunc): the later of the shim's session value and hint, the
-- proxy's own latest fast-path value for the sequence (NULL when none).
CREATE OR REPLACE FUNCTION snowflake._currval(regclass, bigint) RETURNS bigint
LANGUAGE plpgsql VOLATILE
AS $fn$
BEGIN
    IF $1 IS NULL THEN
        RETURN NULL;
    END IF;
    RETURN snowflake._currval_check($1, greatest(
        nullif(pg_catalog.current_setting('snowflake.currval_' || $1::oid::text, true), '')::bigint, $2,
        snowflake._blk_currval($1)));
END
$fn$;

-- _lease reserves positions for the proxy's Go generator. It must run in its
-- own transaction on the proxy's control connection (it may create H, and
-- DDL in a client's transaction could be rolled back): the proxy calls it in
-- autocommit with synchronous_commit on. It takes the per-sequence lock at
-- transaction level, so H's creation is committed before the shim can see
-- the lock free, and a cancel or error releases it.
--
-- prev_hi_pos is the top of the proxy's previous lease (0: none) and
-- issued_pos the highest position it issued from it (0: none); S is
-- raised to it, so that S shows the fast path's IDs
-- to pg_dump, setval and a later switch to the extension. lo_pos is H
-- before the lease, floor_pos S's position: every position at or below
-- either may have been issued, and the proxy continues above both.
-- hi_pos = greatest(want_hi_pos, lo_pos + 1, floor_pos + 1) becomes H.
-- server_ms is the server's clock, which the proxy's generator must not
-- run ahead of (compat/clock.go).
--
-- H's comment names its sequence: an OID reused after a dump and restore,
-- or a renamed sequence, makes H stale, and it is dropped and made again.
--
-- _hw_count's comment tracks the change from the shim's earlier state
-- model, in which leases raised S to their top and the shim applied the
-- full rule to S: a transaction that began before this version was
-- installed may still run the earlier shim code from its catalog caches.
-- Until every such transaction has ended (the comment reads 'waiting'
-- and their virtual transaction ids, then 'settled'), leases raise S to
-- their top as before. CREATE EXTENSION starts 'settled': no earlier code.
IF to_regprocedure('snowflake._lease(regclass, integer, bigint)') IS NOT NULL THEN
    DROP FUNCTION snowflake._lease(regclass, integer, bigint);
END IF;
IF to_regprocedure('snowflake._lease(regclass, integer, bigint, boolean)') IS NOT NULL THEN
    DROP FUNCTION snowflake._lease(regclass, integer, bigint, boolean);
END IF;
IF to_regprocedure('snowflake._lease(regclass, integer, bigint, bigint)') IS NOT NULL THEN
    DROP FUNCTION snowflake._lease(regclass, integer, bigint, bigint);
END IF;
IF to_regclass('snowflake._hw_count') IS NULL THEN
    CREATE SEQUENCE snowflake._hw_count AS bigint MINVALUE 0 START 0 NO CYCLE;
END IF;
CREATE OR REPLACE FUNCTION snowflake._lease(seq regclass, node integer, prev_hi_pos bigint,
                                            want_hi_pos bigint, issued_pos bigint,
                                            OUT lo_pos bigint, OUT hi_pos bigint,
                                            OUT floor_pos bigint, OUT server_ms bigint)
LANGUAGE plpgsql VOLATILE STRICT SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    kind "char";
    rname name;
    ident text;
    hwname text := '_hw_' || seq::oid::text || '_' || node::text;
    hw regclass;
    bd record;
    cmt text;
    older text;
    raise_s boolean := false;
    in_window boolean;
    lt text;
    s_pos bigint;
    h_pos bigint;
    id bigint;
    own bigint;
    live bigint;
    blk_start bigint;
    blk_pos bigint;
    blk_top bigint := 0;
    done bigint;
BEGIN
    SELECT c.relkind, c.relname, quote_ident(n.nspname) || '.' || quote_ident(c.relname)
    INTO kind, rname, ident
    FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
    WHERE c.oid = seq;
    IF kind IS DISTINCT FROM 'S' THEN
        RAISE EXCEPTION '"%" is not a sequence', coalesce(rname, seq::oid::text)
            USING ERRCODE = 'wrong_object_type';
    END IF;
    -- A lease moves H and S as setval would: UPDATE, which setval needs.
    -- USAGE, enough for nextval, let any role that may draw from seq date
    -- a node's later IDs into the future (regression).
    IF NOT has_sequence_privilege(session_user, seq, 'UPDATE') THEN
        RAISE EXCEPTION 'permission denied for sequence %', rname
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    IF node < 1 OR node > 1023 THEN
        RAISE EXCEPTION 'node % is outside 1..1023', node USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF least(prev_hi_pos, want_hi_pos, issued_pos) < 0
       OR greatest(prev_hi_pos, want_hi_pos, issued_pos) > 9007199254740991 THEN -- (2^41-1)<<12 | 4095
        RAISE EXCEPTION 'position % % or % is out of range', prev_hi_pos, want_hi_pos, issued_pos
            USING ERRCODE = 'numeric_value_out_of_range';
    END IF;

    -- The lock (sql/locks.sql), held until the commit.
    in_window := snowflake._seq_lock(seq);
    -- No block made before this lease is used after it (docs/state-model.md,
    -- "Blocks"): a session that gets a fast-path ID from it and then calls
    -- the shim must get a larger ID, and the next block lies above H. That
    -- holds for the blocks of every node, as a session may change its
    -- node, and for the one pair of an earlier shim (_drop_shared_blocks).
    -- The blocks of a sequence the proxy leases are made here, committed
    -- with the lease.
    FOR bd IN SELECT c.oid::regclass AS r
              FROM pg_class c
              WHERE c.relnamespace = 'snowflake'::regnamespace AND c.relkind = 'S'
                AND c.relname LIKE '\_blkd\_' || seq::oid::text || '%'
                AND c.relname ~ ('^_blkd_' || seq::oid::text || '(_[0-9]+)?$') LOOP
        -- The live block ends: R keeps its value, the highest block's
        -- start, which no later jump may go below, but reads as NULL.
        live := pg_sequence_last_value(bd.r);
        IF live IS NOT NULL THEN
            done := setval(bd.r, live, false);
        END IF;
        EXECUTE format('SELECT last_value FROM %s', bd.r) INTO blk_start;
        -- Every ID given from a block lies at or below its top: for the
        -- lease's node, the block's last count; for another's (or the
        -- earlier shim's, where the ID's node bits tell), the end of its
        -- millisecond.
        IF blk_start > 0 THEN
            blk_pos := ((blk_start >> 22) & 2199023255551) << 12;
            IF ((blk_start >> 12) & 1023) = node THEN
                blk_pos := blk_pos + least((blk_start & 4095) + 1023, 4095);
            ELSE
                blk_pos := blk_pos | 4095;
            END IF;
            blk_top := greatest(blk_top, blk_pos);
        END IF;
    END LOOP;
    -- Made, or enabled when a DDL made them (_blocks).
    IF has_sequence_privilege(session_user, seq, 'UPDATE') THEN
        PERFORM snowflake._blocks(seq, node);
    END IF;
    -- A sequence narrower than a snowflake is widened as the 2.5.0 repair
    -- widens it, here where the change is committed at once (in a
    -- client's transaction a rollback would undo it, and the setval made
    -- after it). Without the privilege, or when a client's open
    -- transaction holds a lock on it, it stays narrow and its positions
    -- go to the narrow store (_store).
    IF (pg_sequence_parameters(seq)).maximum_value < 9223372036854775807 THEN
        lt := current_setting('lock_timeout');
        BEGIN
            PERFORM set_config('lock_timeout', '100ms', true);
            EXECUTE format('ALTER SEQUENCE %s AS bigint NO CYCLE MAXVALUE 9223372036854775807', ident);
            -- S takes over what the narrow store holds for it, so that its
            -- last_value shows it (and code that reads S alone, such as an
            -- earlier shim still running in an older transaction, issues
            -- above it).
            s_pos := snowflake._s_pos(seq);
            IF s_pos > 0 THEN
                PERFORM snowflake._store(seq, ((s_pos >> 12) << 22) | (node::bigint << 12) | (s_pos & 4095));
            END IF;
        EXCEPTION WHEN insufficient_privilege OR lock_not_available THEN
            NULL;
        END;
        PERFORM set_config('lock_timeout', lt, true);
    END IF;
    -- The first lock on seq in this transaction, taken after that, makes
    -- this session process catalog invalidations: an H created by another
    -- proxy while we waited is visible to to_regclass below.
    s_pos := snowflake._s_pos(seq);
    -- As in _issue: positions past S's bounds go to the narrow store,
    -- which every sequence reads; S's own value far ahead of the clock
    -- there comes only from bounds made for it, and its owner's sessions
    -- through a proxy would put those positions in the store (regression).
    own := greatest(coalesce(pg_sequence_last_value(seq), 0), 0);
    own := (((own >> 22) & 2199023255551) << 12) | (own & 4095);
    id := (((own + 1) >> 12) << 22) | (node::bigint << 12) | ((own + 1) & 4095);
    IF (own >> 12) > floor(date_part('epoch', clock_timestamp()) * 1000)::bigint - 1672531200000 + 100
       AND id NOT BETWEEN (pg_sequence_parameters(seq)).minimum_value
                      AND (pg_sequence_parameters(seq)).maximum_value THEN
        RAISE EXCEPTION 'nextval: the next ID of sequence "%" lies outside its bounds, ahead of the clock', rname
            USING ERRCODE = 'sequence_generator_limit_exceeded';
    END IF;

    hw := to_regclass('snowflake.' || quote_ident(hwname));
    IF hw IS NOT NULL THEN
        cmt := obj_description(hw, 'pg_class');
        IF cmt IS NULL OR split_part(cmt, E'\n', 1) <> ident THEN
            EXECUTE format('DROP SEQUENCE snowflake.%I', hwname);
            hw := NULL;
        ELSIF cmt <> ident THEN
            -- An H that the earlier state model had left pending.
            EXECUTE format('COMMENT ON SEQUENCE snowflake.%I IS %L', hwname, ident);
        END IF;
    END IF;
    IF hw IS NULL THEN
        EXECUTE format('CREATE SEQUENCE snowflake.%I AS bigint MINVALUE 0 START 0 NO CYCLE', hwname);
        EXECUTE format('COMMENT ON SEQUENCE snowflake.%I IS %L', hwname, ident);
        hw := to_regclass('snowflake.' || quote_ident(hwname));
        PERFORM snowflake._private(hw, NULL);
        -- Shim calls that found no H look again once this has moved.
        done := nextval('snowflake._hw_count');
    END IF;
    h_pos := coalesce(pg_sequence_last_value(hw), 0);
    h_pos := (((h_pos >> 22) & 2199023255551) << 12) | (h_pos & 4095);

    -- What the proxy issued lies inside its previous lease (below H, or
    -- below prev_hi_pos where a failover lost the lease's record). When
    -- H is not where that lease ended (a first lease, or another run of
    -- this node), positions up to H may have been issued unreported: the
    -- proxy continues above H, and S is raised to it so that shim IDs
    -- follow those too.
    IF h_pos <> prev_hi_pos THEN
        issued_pos := h_pos;
    END IF;
    IF least(issued_pos, greatest(h_pos, prev_hi_pos)) > s_pos THEN
        s_pos := least(issued_pos, greatest(h_pos, prev_hi_pos));
        PERFORM snowflake._store(seq, ((s_pos >> 12) << 22) | (node::bigint << 12) | (s_pos & 4095));
    END IF;

    -- Every ID given from a block lies at or below blk_top, the highest
    -- top of the blocks above (each R holds its node's last block, and
    -- blocks only grow). S holds that too, but ALTER SEQUENCE ... RESTART
    -- or a setval into the past lowers S and not R; a session fenced after
    -- it took IDs from a block would get smaller ones from the fast path
    -- (docs/state-model.md, rule 5). The floor takes both, and S is raised
    -- to it, as the proxy takes its floor as held by S.
    IF blk_top > s_pos THEN
        s_pos := blk_top;
        PERFORM snowflake._store(seq, ((s_pos >> 12) << 22) | (node::bigint << 12) | (s_pos & 4095));
    END IF;

    lo_pos := h_pos;
    floor_pos := s_pos;
    hi_pos := greatest(want_hi_pos, h_pos + 1, s_pos + 1);
    id := ((hi_pos >> 12) << 22) | (node::bigint << 12) | (hi_pos & 4095);
    done := setval(hw, id, true);

    cmt := obj_description('snowflake._hw_count'::regclass, 'pg_class');
    IF cmt IS DISTINCT FROM 'settled' THEN
        -- Transactions are named by their virtual transaction ids, which
        -- pg_locks shows to every role.
        SELECT string_agg(l.virtualxid, ' ' ORDER BY l.virtualxid) INTO older
        FROM pg_locks l
        WHERE l.locktype = 'virtualxid' AND l.granted AND l.pid <> pg_backend_pid()
          AND (cmt IS NULL OR cmt NOT LIKE 'waiting %'
               OR l.virtualxid = ANY (string_to_array(substr(cmt, 9), ' ')));
        -- With no 'waiting' list yet, this transaction sees the shim's code,
        -- so it was committed before now: only transactions running now
        -- may run the earlier code.
        IF older IS NULL THEN
            COMMENT ON SEQUENCE snowflake._hw_count IS 'settled';
        ELSE
            raise_s := true;
            IF cmt IS DISTINCT FROM 'waiting ' || older THEN
                EXECUTE format('COMMENT ON SEQUENCE snowflake._hw_count IS %L', 'waiting ' || older);
            END IF;
        END IF;
    END IF;
    IF raise_s AND hi_pos > s_pos THEN
        PERFORM snowflake._store(seq, id);
    END IF;
    server_ms := floor(date_part('epoch', clock_timestamp()) * 1000)::bigint - 1672531200000;
    IF in_window THEN
        PERFORM snowflake._lock_window_step();
    END IF;
    -- An xid makes the commit wait for its WAL flush: the lease is durable
    -- before the proxy hands out any of it.
    PERFORM pg_current_xact_id();
END
$fn$;

-- _release takes back the unused end of a lease when its proxy stops: the
-- proxy issued nothing above issued_pos from the lease whose top is
-- hi_pos, and will not issue from it again. If H is still hi_pos (no later
-- lease), H goes back to issued_pos, so that the node's next lease (the
-- proxy started again) continues from there rather than from the top, up
-- to two seconds ahead of the clock; S is raised to issued_pos.
CREATE OR REPLACE FUNCTION snowflake._release(seq regclass, node integer, hi_pos bigint, issued_pos bigint)
RETURNS void
LANGUAGE plpgsql VOLATILE STRICT SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    hw regclass;
    s_pos bigint;
    h_last bigint;
    done bigint;
    in_window boolean;
BEGIN
    -- UPDATE, as for _lease: it lowers H.
    IF NOT has_sequence_privilege(session_user, seq, 'UPDATE') THEN
        RAISE EXCEPTION 'permission denied for sequence %',
            (SELECT c.relname FROM pg_class c WHERE c.oid = seq)
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    IF node < 1 OR node > 1023 OR least(hi_pos, issued_pos) < 0 OR issued_pos > hi_pos
       OR hi_pos > 9007199254740991 THEN
        RAISE EXCEPTION 'invalid release of node % up to % from %', node, issued_pos, hi_pos
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    -- The lock (sql/locks.sql), held until the commit.
    in_window := coalesce(pg_sequence_last_value('snowflake._lock_window_open'::regclass), 1) <> 0;
    IF in_window THEN
        PERFORM pg_advisory_xact_lock(91560112816128 | seq::oid::bigint);
        PERFORM snowflake._lock_window_step();
    END IF;
    PERFORM FROM snowflake._locks l WHERE l.slot = (seq::oid::bigint % 1024)::integer FOR UPDATE;
    IF NOT FOUND AND NOT in_window THEN
        RAISE EXCEPTION 'snowflake._locks has no row %', seq::oid::bigint % 1024
            USING ERRCODE = 'internal_error', HINT = 'ALTER EXTENSION snowflake UPDATE makes the rows.';
    END IF;
    s_pos := snowflake._s_pos(seq);
    hw := to_regclass('snowflake._hw_' || seq::oid::text || '_' || node::text);
    IF hw IS NULL THEN
        RETURN;
    END IF;
    h_last := coalesce(pg_sequence_last_value(hw), 0);
    IF ((((h_last >> 22) & 2199023255551) << 12) | (h_last & 4095)) <> hi_pos THEN
        RETURN; -- a later lease: nothing to take back
    END IF;
    IF issued_pos > s_pos THEN
        PERFORM snowflake._store(seq, ((issued_pos >> 12) << 22) | (node::bigint << 12) | (issued_pos & 4095));
    END IF;
    done := setval(hw, ((issued_pos >> 12) << 22) | (node::bigint << 12) | (issued_pos & 4095), true);
    PERFORM pg_current_xact_id();
END
$fn$;

-- snowflake.set_config stands in for set_config('snowflake.node', v, is_local): the
-- proxy routes such calls here (rewrite/touch.go; the name keeps the
-- result column named set_config, and pg_catalog.set_config still wins for
-- unqualified calls, pg_catalog being searched first) because on a stock server
-- snowflake.node is a placeholder anyone may set, while the extension
-- declares it superuser-only (PostgreSQL 15: or GRANT SET ON PARAMETER),
-- integer 0..1023. Other names pass through to set_config unchanged.
CREATE OR REPLACE FUNCTION snowflake.set_config(setting_name text, new_value text, is_local boolean) RETURNS text
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    ok boolean;
    v text := btrim(new_value);
BEGIN
    IF lower(btrim(setting_name)) = 'snowflake.node' THEN
        SELECT rolsuper INTO ok FROM pg_roles WHERE rolname = current_user;
        IF NOT coalesce(ok, false) AND current_setting('server_version_num')::int >= 150000 THEN
            EXECUTE 'SELECT pg_catalog.has_parameter_privilege(''snowflake.node'', ''SET'')' INTO ok;
        END IF;
        IF NOT coalesce(ok, false) THEN
            RAISE EXCEPTION 'permission denied to set parameter "snowflake.node"'
                USING ERRCODE = 'insufficient_privilege';
        END IF;
        IF v IS NOT NULL THEN
            IF v !~ '^[+-]?[0-9]+$' THEN
                RAISE EXCEPTION 'invalid value for parameter "snowflake.node": "%"', new_value
                    USING ERRCODE = 'invalid_parameter_value';
            END IF;
            IF length(ltrim(v, '+-0')) > 9 OR v::bigint < 0 OR v::bigint > 1023 THEN
                RAISE EXCEPTION '% is outside the valid range for parameter "snowflake.node" (0 .. 1023)', v
                    USING ERRCODE = 'invalid_parameter_value';
            END IF;
            v := v::bigint::text;
        END IF;
        RETURN set_config('snowflake.node', v, is_local);
    END IF;
    RETURN set_config(setting_name, new_value, is_local);
END
$fn$;

-- snowflake.current_setting stands in for current_setting('snowflake.node')
-- (rewrite/touch.go): 0 when no node is set anywhere, as the extension's
-- declared setting reports, where a stock server knows no such setting.
CREATE OR REPLACE FUNCTION snowflake.current_setting(setting_name text) RETURNS text
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $fn$
    SELECT CASE WHEN lower(btrim(setting_name)) = 'snowflake.node'
                THEN COALESCE(NULLIF(current_setting('snowflake.node', true), ''), '0')
                ELSE current_setting(setting_name) END
$fn$;

-- convert_column_to_int8 changes a column to int8 when it is not, and the
-- columns of foreign keys that reference it; returns how many it altered.
CREATE OR REPLACE FUNCTION snowflake.convert_column_to_int8(p_rel regclass, p_attnum smallint) RETURNS integer
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog
AS $fn$
DECLARE
    a record;
    fk record;
    cmd text;
    n integer := 0;
BEGIN
    SELECT quote_ident(ns.nspname) AS nsp, quote_ident(c.relname) AS rel,
           quote_ident(att.attname) AS col, att.atttypid
    INTO a
    FROM pg_attribute att
    JOIN pg_class c ON c.oid = att.attrelid
    JOIN pg_namespace ns ON ns.oid = c.relnamespace
    WHERE att.attrelid = p_rel AND att.attnum = p_attnum AND NOT att.attisdropped;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'column number % of relation "%" does not exist', p_attnum, p_rel
            USING ERRCODE = 'undefined_column';
    END IF;
    IF a.atttypid <> 'int8'::regtype THEN
        cmd := 'ALTER TABLE ' || a.nsp || '.' || a.rel || ' ALTER COLUMN ' || a.col || ' SET DATA TYPE int8';
        RAISE NOTICE 'EXECUTE %', cmd;
        EXECUTE cmd;
        n := 1;
    END IF;

    -- Columns that reference this one through a foreign key.
    FOR fk IN
        SELECT con.conrelid, con.conkey[k.i] AS attnum
        FROM pg_constraint con,
             generate_subscripts(con.confkey, 1) AS k(i)
        WHERE con.contype = 'f' AND con.confrelid = p_rel
          AND con.confkey[k.i] = p_attnum
        ORDER BY con.conname, k.i
    LOOP
        n := n + snowflake.convert_column_to_int8(fk.conrelid::regclass, fk.attnum::smallint);
    END LOOP;
    RETURN n;
END
$fn$;

-- convert_sequence_to_snowflake turns a sequence and the column(s) fed by it
-- into snowflake use, as the extension's function does.
CREATE OR REPLACE FUNCTION snowflake.convert_sequence_to_snowflake(p_seqid regclass) RETURNS integer
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog
AS $fn$
DECLARE
    s record;
    d record;
    col record;
    plain_name text;
    full_name text;
    def text;
    cmd text;
    n integer := 0;
BEGIN
    SELECT c.relname, n.nspname, quote_ident(c.relname) AS qrel, quote_ident(n.nspname) AS qnsp
    INTO s
    FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
    WHERE c.oid = p_seqid AND c.relkind = 'S';
    IF NOT FOUND THEN
        RAISE EXCEPTION 'Input value "%" is not a valid convertable sequence', p_seqid;
    END IF;
    plain_name := s.qrel;
    full_name := s.qnsp || '.' || s.qrel;

    -- The column that owns the sequence (serial: 'a', identity: 'i').
    SELECT dep.refobjid AS relid, dep.refobjsubid AS attnum, dep.deptype
    INTO d
    FROM pg_depend dep
    WHERE dep.classid = 'pg_class'::regclass AND dep.objid = p_seqid
      AND dep.refclassid = 'pg_class'::regclass AND dep.refobjsubid > 0
      AND dep.deptype IN ('a', 'i')
    ORDER BY dep.deptype
    LIMIT 1;

    IF FOUND THEN
        SELECT quote_ident(ns.nspname) AS qnsp, quote_ident(c.relname) AS qrel, c.relname,
               att.attname, quote_ident(att.attname) AS qcol, att.attidentity
        INTO col
        FROM pg_attribute att
        JOIN pg_class c ON c.oid = att.attrelid
        JOIN pg_namespace ns ON ns.oid = c.relnamespace
        WHERE att.attrelid = d.relid AND att.attnum = d.attnum;

        IF col.attidentity IN ('a', 'd') THEN
            UPDATE pg_attribute SET attidentity = ''
            WHERE attrelid = d.relid AND attnum = d.attnum;
            RAISE NOTICE 'Update pg_attribute: reset attidentity value for table %, column %',
                d.relid::regclass, col.attname;
        ELSE
            SELECT pg_get_expr(ad.adbin, ad.adrelid, true) INTO def
            FROM pg_attrdef ad WHERE ad.adrelid = d.relid AND ad.adnum = d.attnum;
            IF def IS DISTINCT FROM 'nextval(' || quote_literal(plain_name) || '::regclass)'
               AND def IS DISTINCT FROM 'nextval(' || quote_literal(full_name) || '::regclass)' THEN
                RAISE EXCEPTION 'definition of DEFAULT value for column "%" of relation "%" does not correspond serial or bigserial type: "%"',
                    col.attname, col.relname, coalesce(def, '<NULL>');
            END IF;
        END IF;

        n := snowflake.convert_column_to_int8(d.relid::regclass, d.attnum::smallint);
        cmd := 'ALTER TABLE ' || col.qnsp || '.' || col.qrel || ' ALTER COLUMN ' || col.qcol
            || ' SET DEFAULT snowflake.nextval(' || quote_literal(full_name) || '::regclass)';
        RAISE NOTICE 'EXECUTE %', cmd;
        EXECUTE cmd;
    ELSE
        -- A plain sequence: convert every column whose default is exactly
        -- nextval('<seq>'::regclass).
        FOR col IN
            SELECT ad.adrelid, ad.adnum, quote_ident(ns.nspname) AS qnsp,
                   quote_ident(c.relname) AS qrel, quote_ident(att.attname) AS qcol
            FROM pg_attrdef ad
            JOIN pg_class c ON c.oid = ad.adrelid
            JOIN pg_namespace ns ON ns.oid = c.relnamespace
            JOIN pg_attribute att ON att.attrelid = ad.adrelid AND att.attnum = ad.adnum
            WHERE pg_get_expr(ad.adbin, ad.adrelid, true) IN (
                      'nextval(' || quote_literal(plain_name) || '::regclass)',
                      'nextval(' || quote_literal(full_name) || '::regclass)')
            ORDER BY ns.nspname, c.relname, ad.adnum
        LOOP
            n := n + snowflake.convert_column_to_int8(col.adrelid::regclass, col.adnum::smallint);
            cmd := 'ALTER TABLE ' || col.qnsp || '.' || col.qrel || ' ALTER COLUMN ' || col.qcol
                || ' SET DEFAULT snowflake.nextval(' || quote_literal(full_name) || '::regclass)';
            RAISE NOTICE 'EXECUTE %', cmd;
            EXECUTE cmd;
            n := n + 1;
        END LOOP;
    END IF;

    cmd := 'ALTER SEQUENCE ' || full_name || ' AS bigint NO CYCLE MAXVALUE 9223372036854775807';
    RAISE NOTICE '%', cmd;
    EXECUTE cmd;

    PERFORM snowflake.nextval(p_seqid);
    RETURN n;
END
$fn$;

-- Privileges: the API is usable by PUBLIC; _issue checks for itself.
-- _lease, _release and _blocks are the proxies': the installer's, and a
-- control role's it is granted to. Open to PUBLIC, any role could lease
-- a sequence of its own (a temporary one will do) and so hold the lock
-- slot another sequence shares until it commits, or store positions far
-- ahead in the narrow store every sequence reads; and code an
-- unprivileged role owns, run under a privileged session user (an index
-- expression during autovacuum's ANALYZE), passed their session_user
-- checks (regression).
GRANT USAGE ON SCHEMA snowflake TO PUBLIC;
-- snowflake.id_seq as the extension grants it: PUBLIC may use it (nextval,
-- currval), not read or write it. Earlier shims granted SELECT and UPDATE
-- too, which let any role setval it, or call _lease for it and date every
-- later ID of a node into the future, or _release and lower a node's H
-- under a proxy still issuing from that lease; an update takes them back.
REVOKE SELECT, UPDATE ON SEQUENCE snowflake.id_seq FROM PUBLIC;
GRANT USAGE ON SEQUENCE snowflake.id_seq TO PUBLIC;
GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA snowflake TO PUBLIC;
REVOKE EXECUTE ON FUNCTION snowflake._narrow_put(bigint), snowflake._narrow_note(regclass),
    snowflake._s_pos(regclass), snowflake._store(regclass, bigint), snowflake._seq_lock(regclass),
    snowflake._blk_enable(regclass), snowflake._blk_make(regclass, integer, bigint) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION snowflake._lease(regclass, integer, bigint, bigint, bigint),
    snowflake._release(regclass, integer, bigint, bigint), snowflake._blocks(regclass, integer),
    snowflake._private(regclass, text) FROM PUBLIC;
-- The shim's own tables and sequences are the installer's alone, whatever
-- its default privileges gave others (_private); PUBLIC keeps what the
-- per-row path needs of the block sequences. Not id_seq, the user's, nor
-- _claims, which a proxy's control role may have been granted.
PERFORM snowflake._private(c.oid::regclass,
                           CASE WHEN c.relname LIKE '\_blk\_%' THEN 'USAGE'
                                WHEN c.relname LIKE '\_blkd\_%' THEN 'SELECT' END)
FROM pg_class c
WHERE c.relnamespace = 'snowflake'::regnamespace AND c.relkind IN ('r', 'S')
  AND c.relname NOT IN ('id_seq', '_claims');
-- Blocks of id_seq and of the defaults that exist (an install, or an update
-- from a shim without blocks). Not where the caller may not make them.
PERFORM snowflake._blocks_all(NULL);
