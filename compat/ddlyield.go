package compat

// The proxy's own statements on a database give way to the users' DDL.
//
// A lease (_lease), a release (_release) and the catalog watch's blocks
// (_blocks_all) take the lock's rows of snowflake._locks and then may
// create or write sequences in schema snowflake. DDL that drops or alters
// those objects (DROP EXTENSION, DROP SCHEMA snowflake CASCADE, DROP TABLE
// of a table whose sequence has blocks) takes them in its own order and can
// close a cycle with such a statement. PostgreSQL then aborts the
// transaction whose deadlock_timeout runs out first: the one that began to
// wait first, often the user's (regression: DROP EXTENSION right after
// CREATE EXTENSION and a first nextval failed with 40P01 in CI). These
// statements therefore wait at most half the session's deadlock_timeout
// for any lock and fail with lock_not_available (55P03) first (or at their
// own timeout, should that come sooner): the user's transaction is the one
// aborted only if the proxy's statement began its wait more than half a
// deadlock_timeout after the DDL began its own, where the proxy's steps
// between two locks take milliseconds. Nothing is lost: a failed lease
// leaves the session's statement to the shim, which waits as the
// extension would, and blocks not made leave per-row calls on the slow
// path until a later lease or DDL makes them.

// yieldToDDL is a FROM item that sets lock_timeout, for the statement's
// transaction, to half the session's deadlock_timeout (at least 1 ms). A
// statement that uses it calls its function in the target list of the
// query that reads this item, so that the setting is made first.
const yieldToDDL = `(SELECT pg_catalog.set_config('lock_timeout',
	GREATEST(1, pg_catalog.round(pg_catalog.date_part('epoch',
		pg_catalog.current_setting('deadlock_timeout')::pg_catalog.interval) * 500))::pg_catalog.int8::pg_catalog.text,
	true)) AS yield`
