package pgtest

// ShimWorkSQL reads what marks the server's own snowflake.nextval work in a
// session: the calls of the shim's slow path (_nextval_slow, a PL/pgSQL
// function that track_functions counts; its pending count may include
// earlier transactions' of the session, so compare two readings), and the
// values of the block sequences that the per-row path draws with native
// nextval (docs/state-model.md, "Blocks"), which any draw moves. The
// inlined snowflake.nextval itself is counted by nothing. Columns: int8,
// text.
const ShimWorkSQL = `SELECT coalesce(pg_catalog.pg_stat_get_xact_function_calls(
		'snowflake._nextval_slow(regclass)'::pg_catalog.regprocedure), 0)::int8,
	coalesce((SELECT pg_catalog.string_agg(pg_catalog.pg_sequence_last_value(c.oid)::text, ',' ORDER BY c.oid)
		FROM pg_catalog.pg_class c
		WHERE c.relnamespace = 'snowflake'::pg_catalog.regnamespace AND c.relname LIKE '\_blk\_%'), '')`
