-- snowflake-proxy shim: the sequence repair of pgEdge's 2.4 -> 2.5.0 update,
-- pasted into the DO blocks of install.sql and update.sql, which run it
-- when the versions they pass through cross from 2.4 to 2.5.0 (as
-- PostgreSQL runs that update script on CREATE EXTENSION of 2.5.0 or later
-- too, which it reaches from the 2.3 install script).
--
-- convert_sequence_to_snowflake before 2.5 set a sequence's MAXVALUE to
-- its last_value + 1, and the extension's nextval, which ignores MAXVALUE,
-- then stored snowflakes far above it: pg_dump writes both, and the
-- restore fails on the setval. The repair makes such sequences AS bigint
-- MAXVALUE 9223372036854775807. It finds them as pgEdge does (a sequence
-- owned by a column whose default calls snowflake.nextval, or whose
-- last_value is above its MAXVALUE) and also finds sequences named by a
-- column default that calls snowflake.nextval without being owned by the
-- column: pgEdge's query misses those, which its C nextval can still
-- use, while the shim's nextval stores values with setval, which honours
-- MAXVALUE. It also finds the sequences the shim and the proxy issued
-- from while they were narrow (functions.sql, _narrow_put: their
-- snowflakes were kept in the narrow store, not above their MAXVALUE),
-- and those the proxy leased (an H names them), and raises each widened
-- sequence to its position in the narrow store, so that its last_value
-- shows its snowflakes as the extension's would. pgEdge's update script
-- runs with client_min_messages at warning, so its notices never reach
-- the client: this one has none.
DECLARE
    r record;
    pos bigint;
BEGIN
    FOR r IN
        SELECT c.oid, n.nspname, c.relname
        FROM pg_catalog.pg_class c
        JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
        JOIN pg_catalog.pg_sequence s ON s.seqrelid = c.oid
        WHERE c.relkind = 'S' AND s.seqmax < 9223372036854775807
          AND NOT pg_catalog.pg_is_other_temp_schema(n.oid)
          AND (EXISTS (SELECT FROM pg_catalog.pg_depend d
                       JOIN pg_catalog.pg_attrdef ad ON ad.adrelid = d.refobjid AND ad.adnum = d.refobjsubid
                       WHERE d.classid = 'pg_catalog.pg_class'::pg_catalog.regclass AND d.objid = c.oid
                         AND d.deptype IN ('a', 'i', 'n')
                         AND pg_catalog.pg_get_expr(ad.adbin, ad.adrelid, true) LIKE '%snowflake.nextval(%')
               OR EXISTS (SELECT FROM pg_catalog.pg_depend d
                          JOIN pg_catalog.pg_attrdef ad ON ad.oid = d.objid
                          WHERE d.classid = 'pg_catalog.pg_attrdef'::pg_catalog.regclass
                            AND d.refclassid = 'pg_catalog.pg_class'::pg_catalog.regclass AND d.refobjid = c.oid
                            AND pg_catalog.pg_get_expr(ad.adbin, ad.adrelid, true) LIKE '%snowflake.nextval(%')
               OR EXISTS (SELECT FROM snowflake._narrow nw WHERE nw.seq = c.oid)
               OR EXISTS (SELECT FROM pg_catalog.pg_class h
                          WHERE h.relnamespace = 'snowflake'::pg_catalog.regnamespace AND h.relkind = 'S'
                            AND h.relname LIKE '\_hw\_' || c.oid::text || '\_%')
               -- pg_sequences shows last_value only to who may read it
               OR CASE WHEN pg_catalog.has_sequence_privilege(c.oid, 'SELECT,USAGE')
                       THEN pg_catalog.pg_sequence_last_value(c.oid) > s.seqmax END)
        ORDER BY n.nspname, c.relname
    LOOP
        EXECUTE pg_catalog.format('ALTER SEQUENCE %I.%I AS bigint NO CYCLE MAXVALUE 9223372036854775807',
                                  r.nspname, r.relname);
        pos := snowflake._s_pos(r.oid);
        IF pos > 0 AND pos > (((greatest(pg_catalog.pg_sequence_last_value(r.oid), 0) >> 22) & 2199023255551) << 12)
                             | (greatest(pg_catalog.pg_sequence_last_value(r.oid), 0) & 4095) THEN
            PERFORM pg_catalog.setval(r.oid, ((pos >> 12) << 22) | (pos & 4095), true);
        END IF;
    END LOOP;
END;
