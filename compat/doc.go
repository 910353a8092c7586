// Package compat makes a stock PostgreSQL speak the pgEdge snowflake API.
//
// It owns four things:
//
//   - the shim (shim.go, sql/*.sql): the whole SQL API of the extension
//     written in SQL and PL/pgSQL, installed by CREATE EXTENSION snowflake
//     sent through the proxy. ExtensionSQL turns CREATE/DROP/ALTER
//     EXTENSION into one DO statement that runs in the client's own session
//     and transaction, so it is as transactional as the real statement and
//     gives PostgreSQL's errors and notices. versions.go lists the pgEdge
//     versions it installs and updates along; sql/repair.sql is the
//     sequence repair of pgEdge's update to 2.5.0;
//   - the lease store (leasestore.go): generator.LeaseStore on a small pgx
//     pool per database (pools.go: closed once unused for DatabaseIdle),
//     reserving windows of positions through the shim's snowflake._lease
//     function, one round trip per lease;
//   - the node claim (claim.go, claimdb.go): one session advisory lock per
//     database on a dedicated control connection, so two live proxies with
//     one node id on one database are reported instead of silently issuing
//     duplicates. Its key lives in the private table snowflake._claims, and
//     only a holder whose role may update that table counts as a proxy: no
//     other role can block or fake the claim (design in claim.go).
//     claimstate.go gives its state per database (Service.Claims) to
//     health checks and metrics;
//   - --node auto (autonode.go): ClaimNode takes a node no live proxy of
//     the server holds, in snowflake_proxy.node_claims of the control
//     database, keeps it with a heartbeat, and frees a crashed proxy's
//     node only once its last lease has expired (design in autonode.go).
//
// Its subpackage catalog holds the catalog knowledge of a proxy session
// (the query a session runs on its own server connection, and its typed
// decoding), apart so that wire can use it.
//
// Service (service.go) ties them together and implements wire.Snowflakes
// and wire.FallbackClassifier (why the fast path refused, for metrics);
// LeaseStats and CatalogWatches (catalog_epoch.go) report to metrics. The
// catalog watch of each database (catalog_epoch.go) tells sessions when
// DDL made elsewhere may have made their caches stale, and when what
// roles may use may have changed unannounced (privilege_epoch.go); a
// session that ran DDL waits for it to make per-row blocks before its next
// INSERT where no event trigger makes them (awaitblocks.go). Both
// the watch and the claim stop, with their connections, once no session
// has used them for DatabaseIdle. The proxy's own statements that take
// the lock (leases, releases, the watch's blocks) give way to the users'
// DDL when the two wait for each other (ddlyield.go).
//
// The state model shared by the shim and the Go generator is described in
// docs/state-model.md and at the top of sql/functions.sql: the sequence's
// last_value keeps the highest position the shim issued (and, one lease
// late, the fast path's), a hidden per-(sequence, node) high-water sequence
// created only by _lease holds the top of that node's leases, the two
// paths share each millisecond by count (the generator below 3072, the
// shim above while a lease may be live), per-row calls take IDs from
// blocks the locked path reserves (two sequences per sequence, made by
// _blocks from leases and the catalog watch), and a per-sequence row lock on a
// private table (sql/locks.sql), which no role without privileges can
// take or hold, serialises the shim's nextval with _lease. clock.go holds
// the generator's clock back to the server's, so that a session's shim
// IDs follow its fast-path IDs.
//
// Known differences from the C extension, with their reasons:
//
//   - errors raised by the shim carry a CONTEXT field naming the PL/pgSQL
//     function (PL/pgSQL always adds it), which the proxy removes on its
//     way to the client (wire/errcontext.go); message, SQLSTATE, DETAIL
//     and HINT are the extension's;
//   - the session's currval lives in a custom setting, which a ROLLBACK
//     restores: after a rolled-back transaction currval reports the value
//     from before it (or the "not yet defined" error) where the extension
//     keeps the rolled-back value;
//   - the shim writes sequences with setval, so it runs as the installer
//     (SECURITY DEFINER), who must be able to setval the user's sequences
//     (a superuser or their owner), and a sequence whose MAXVALUE is below
//     a snowflake cannot store one (convert_sequence_to_snowflake fixes
//     that, as the extension's 2.5 does);
//   - convert_sequence_to_snowflake clears an identity flag in pg_attribute
//     as the extension does, which needs a superuser;
//   - each shim call that takes the lock (one per block of 1024 per-row
//     IDs, every call of a sequence without blocks) consumes a
//     transaction id (the subtransaction that holds its lock), where the
//     extension's nextval consumes none beyond its transaction's own
//     (docs/state-model.md, "The lock" and "Blocks"); the sequence's
//     last_value is the top of the latest block.
package compat
