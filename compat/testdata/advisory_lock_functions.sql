-- The functions of the shim before the lock became a row lock: _issue,
-- _lease and _release as released, taking the advisory lock
-- (0x5346 << 32 | oid). The other functions were the same. Tests install
-- them over the current shim, after dropping the lock's objects, to get the
-- state an update starts from (lock_window_test.go).

CREATE OR REPLACE FUNCTION snowflake._issue(seq regclass, who name) RETURNS bigint
LANGUAGE plpgsql VOLATILE STRICT SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    rname name;
    inc bigint;
    node_txt text;
    node integer;
    lk bigint;
    hwname text;
    hw regclass;
    made bigint;
    seen text;
    top bigint := 0;
    last bigint;
    now_ms bigint;
    ms bigint;
    cnt bigint;
    v bigint;
    done bigint;
    ok boolean;
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
    inc := (pg_sequence_parameters(seq)).increment;
    IF inc < 1 THEN
        inc := 1; -- a zero or negative increment would repeat positions
    END IF;
    hwname := '_hw_' || seq::oid::text || '_' || node::text;

    lk := 91560112816128 | seq::oid::bigint; -- x'5346'::bigint << 32
    BEGIN
        IF NOT pg_try_advisory_lock(lk) THEN
            PERFORM pg_advisory_lock(lk);
        END IF;

        -- H, the top of this node's leases. to_regclass answers from the
        -- catalog caches, which a transaction that already holds all its
        -- locks does not refresh: it can miss an H created since. Under
        -- the lock, a _hw_count that moved since this session last found no
        -- H means an H may have been committed meanwhile; a name lookup
        -- that asks for a lock refreshes the caches when it finds nothing,
        -- and to_regclass then sees what was committed. The session
        -- remembers the count it checked, so this costs one lookup per
        -- new H, and nothing in a database where no lease was ever taken.
        hw := to_regclass('snowflake.' || hwname);
        IF hw IS NULL THEN
            made := pg_sequence_last_value('snowflake._hw_count'::regclass);
            seen := 'snowflake._hw_seen_' || seq::oid::text || '_' || node::text;
            IF made IS NOT NULL AND current_setting(seen, true) IS DISTINCT FROM made::text THEN
                BEGIN
                    EXECUTE 'SELECT FROM snowflake.' || hwname;
                EXCEPTION WHEN undefined_table THEN
                    NULL;
                END;
                hw := to_regclass('snowflake.' || hwname);
                IF hw IS NULL THEN
                    PERFORM set_config(seen, made::text, false);
                END IF;
            END IF;
        END IF;
        IF hw IS NOT NULL THEN
            top := coalesce(pg_sequence_last_value(hw), 0);
            top := (((top >> 22) & 2199023255551) << 12) | (top & 4095);
        END IF;

        last := coalesce(pg_sequence_last_value(seq), 0);
        last := (((last >> 22) & 2199023255551) << 12) | (last & 4095);
        now_ms := floor(date_part('epoch', clock_timestamp()) * 1000)::bigint - 1672531200000;
        ms := last >> 12;
        cnt := last & 4095;
        IF (top >> 12) > greatest(now_ms, ms) + 5 THEN
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
        v := (ms << 22) | (node::bigint << 12) | cnt;
        done := setval(seq, v, true);

        ok := pg_advisory_unlock(lk);
    EXCEPTION WHEN OTHERS OR query_canceled THEN
        -- Never leave the lock behind: not on an error, a cancel or a
        -- statement timeout, wherever it struck.
        IF EXISTS (SELECT 1 FROM pg_locks l
                   WHERE l.locktype = 'advisory' AND l.pid = pg_backend_pid()
                     AND l.classid = 21318 AND l.objid = seq::oid AND l.objsubid = 1
                     AND l.granted) THEN
            PERFORM pg_advisory_unlock(lk);
        END IF;
        RAISE;
    END;
    RETURN v;
END
$fn$;

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
    cmt text;
    older text;
    raise_s boolean := false;
    s_last bigint;
    s_pos bigint;
    h_pos bigint;
    id bigint;
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
    IF NOT has_sequence_privilege(session_user, seq, 'USAGE, UPDATE') THEN
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

    PERFORM pg_advisory_xact_lock(91560112816128 | seq::oid::bigint);
    -- The first lock on seq in this transaction, taken after the advisory
    -- lock, makes this session process catalog invalidations: an H created
    -- by another proxy while we waited is visible to to_regclass below.
    s_last := coalesce(pg_sequence_last_value(seq), 0);
    s_pos := (((s_last >> 22) & 2199023255551) << 12) | (s_last & 4095);

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
        done := setval(seq, ((s_pos >> 12) << 22) | (node::bigint << 12) | (s_pos & 4095), true);
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
        done := setval(seq, id, true);
    END IF;
    server_ms := floor(date_part('epoch', clock_timestamp()) * 1000)::bigint - 1672531200000;
    -- An xid makes the commit wait for its WAL flush: the lease is durable
    -- before the proxy hands out any of it.
    PERFORM pg_current_xact_id();
END
$fn$;

CREATE OR REPLACE FUNCTION snowflake._release(seq regclass, node integer, hi_pos bigint, issued_pos bigint)
RETURNS void
LANGUAGE plpgsql VOLATILE STRICT SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    hw regclass;
    s_last bigint;
    h_last bigint;
    done bigint;
BEGIN
    IF NOT has_sequence_privilege(session_user, seq, 'USAGE, UPDATE') THEN
        RAISE EXCEPTION 'permission denied for sequence %', seq
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    IF node < 1 OR node > 1023 OR least(hi_pos, issued_pos) < 0 OR issued_pos > hi_pos
       OR hi_pos > 9007199254740991 THEN
        RAISE EXCEPTION 'invalid release of node % up to % from %', node, issued_pos, hi_pos
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    PERFORM pg_advisory_xact_lock(91560112816128 | seq::oid::bigint);
    s_last := coalesce(pg_sequence_last_value(seq), 0);
    hw := to_regclass('snowflake._hw_' || seq::oid::text || '_' || node::text);
    IF hw IS NULL THEN
        RETURN;
    END IF;
    h_last := coalesce(pg_sequence_last_value(hw), 0);
    IF ((((h_last >> 22) & 2199023255551) << 12) | (h_last & 4095)) <> hi_pos THEN
        RETURN; -- a later lease: nothing to take back
    END IF;
    IF issued_pos > ((((s_last >> 22) & 2199023255551) << 12) | (s_last & 4095)) THEN
        done := setval(seq, ((issued_pos >> 12) << 22) | (node::bigint << 12) | (issued_pos & 4095), true);
    END IF;
    done := setval(hw, ((issued_pos >> 12) << 22) | (node::bigint << 12) | (issued_pos & 4095), true);
    PERFORM pg_current_xact_id();
END
$fn$;
