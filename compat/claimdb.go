package compat

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// The database side of the node claim (design in claim.go): the private
// table of keys, the claim transaction, the holders of a key.

// errClaimTable is returned (wrapped) when the control role may not create
// or use snowflake._claims.
var errClaimTable = errors.New("the control role may not create or use snowflake._claims")

// claimTableSQL creates the table of claim keys. It is sent as one
// multi-statement Query: one implicit transaction, so the table never
// exists with PUBLIC privileges or without its comment.
var claimTableSQL = `CREATE TABLE snowflake._claims (
	node pg_catalog.int4 PRIMARY KEY CHECK (node BETWEEN 1 AND 1023),
	lock_key pg_catalog.int8 NOT NULL
);
REVOKE ALL ON TABLE snowflake._claims FROM PUBLIC;
` + privateTableSQL("snowflake._claims") + `
COMMENT ON TABLE snowflake._claims IS 'snowflake-proxy: the advisory lock key of each node''s claim; a session holding it whose role may UPDATE this table is a proxy'`

// privateTableSQL is a statement that revokes every grant on table but its
// owner's: what ALTER DEFAULT PRIVILEGES of the control role gave other
// roles when it created the table. A role that may UPDATE snowflake._claims
// counts as a proxy, and one that may write node_claims could free a node
// a live proxy holds (regression). For the Query that creates the table.
func privateTableSQL(table string) string {
	return `DO $sfpriv$
DECLARE
	g record;
BEGIN
	FOR g IN SELECT DISTINCT a.grantee FROM pg_catalog.pg_class c, pg_catalog.aclexplode(c.relacl) a
	         WHERE c.oid = '` + table + `'::pg_catalog.regclass AND a.grantee <> c.relowner LOOP
		EXECUTE pg_catalog.format('REVOKE ALL ON TABLE ` + table + ` FROM %s',
			CASE WHEN g.grantee = 0 THEN 'PUBLIC' ELSE pg_catalog.quote_ident(pg_catalog.pg_get_userbyid(g.grantee)) END);
	END LOOP;
END
$sfpriv$;`
}

// holdersSQL lists the sessions holding advisory lock key $1 in this
// database (a bigint key is (classid, objid) = (high, low 32 bits),
// objsubid 1), trusted ones first: those whose session user may UPDATE the
// table, itself or as a role it may SET ROLE to (a control role can work
// through such a role). pg_stat_activity shows usesysid, usename,
// application_name and pid of every session to every role; the client
// address only to members of the session's role and pg_read_all_stats
// ('unknown' otherwise; 'local' for a Unix socket).
const holdersSQL = `SELECT l.pid, coalesce(a.usename::pg_catalog.text, ''), coalesce(a.application_name, ''),
	CASE WHEN a.client_addr IS NOT NULL THEN pg_catalog.host(a.client_addr)
	     WHEN a.client_port = -1 THEN 'local' ELSE 'unknown' END,
	EXISTS (SELECT 1 FROM pg_catalog.pg_roles r
	        WHERE pg_catalog.pg_has_role(a.usesysid, r.oid, 'MEMBER')
	          AND pg_catalog.has_table_privilege(r.oid, 'snowflake._claims'::pg_catalog.regclass, 'UPDATE')) AS trusted
FROM pg_catalog.pg_locks l LEFT JOIN pg_catalog.pg_stat_activity a ON a.pid = l.pid
WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1
  AND l.database = (SELECT d.oid FROM pg_catalog.pg_database d WHERE d.datname = pg_catalog.current_database())
  AND l.classid = (($1::pg_catalog.int8 >> 32) & 4294967295)::pg_catalog.oid
  AND l.objid = ($1::pg_catalog.int8 & 4294967295)::pg_catalog.oid
  AND l.pid IS DISTINCT FROM pg_catalog.pg_backend_pid()
ORDER BY trusted DESC, l.pid`

// claimHolder is a session holding a claim key.
type claimHolder struct {
	pid             int32 // 0: none (a prepared transaction)
	role, app, addr string
	trusted         bool // its role may UPDATE snowflake._claims (holdersSQL)
}

func (h claimHolder) String() string {
	return fmt.Sprintf("backend pid %d (role %q, application_name %q, client %s)", h.pid, h.role, h.app, h.addr)
}

// claimResult is the outcome of takeClaim: the key now held, or the
// trusted session that holds the node's key; squatters are the untrusted
// holders of a key the claim moved away from.
type claimResult struct {
	key       int64
	holder    *claimHolder
	squatters []claimHolder
}

// takeClaim claims node on conn: ErrNoShim without the shim, errClaimTable
// when the control role may not create or use the table, otherwise a
// claimResult. Unless a key is held, the caller closes conn: after an
// error it may hold a lock.
func takeClaim(ctx context.Context, conn *pgx.Conn, node int) (claimResult, error) {
	var shim, table bool
	err := conn.QueryRow(ctx, `SELECT pg_catalog.to_regprocedure('snowflake._shim_version()') IS NOT NULL,
		pg_catalog.to_regclass('snowflake._claims') IS NOT NULL`).Scan(&shim, &table)
	if err != nil {
		return claimResult{}, err
	}
	if !shim {
		return claimResult{}, ErrNoShim
	}
	if !table {
		if err := createClaimTable(ctx, conn); err != nil {
			return claimResult{}, err
		}
	}
	res, err := claimTx(ctx, conn, node)
	return res, claimErr(err)
}

// createClaimTable creates snowflake._claims. Another proxy creating it at
// the same moment makes CREATE TABLE fail with duplicate_table,
// duplicate_object (its row type, when the other commits between the two
// checks) or unique_violation (a catalog index, after waiting for the
// other's commit); then the table exists, which is checked, not assumed.
func createClaimTable(ctx context.Context, conn *pgx.Conn) error {
	_, err := conn.Exec(ctx, claimTableSQL)
	var pe *pgconn.PgError
	if errors.As(err, &pe) && (pe.Code == "42P07" || pe.Code == "42710" || pe.Code == "23505") {
		var exists bool
		if qerr := conn.QueryRow(ctx, `SELECT pg_catalog.to_regclass('snowflake._claims') IS NOT NULL`).Scan(&exists); qerr == nil && exists {
			return nil
		}
	}
	return claimErr(err)
}

// claimErr classifies the errors of the claim's statements.
func claimErr(err error) error {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		switch pe.Code {
		case "42501": // insufficient_privilege
			return fmt.Errorf("%w: %w", errClaimTable, err)
		case "3F000", "42P01": // schema, table dropped meanwhile (DROP EXTENSION)
			return fmt.Errorf("%w: %w", ErrNoShim, err)
		}
	}
	return err
}

// claimTx is the claim transaction. The row lock serialises the claims of
// node; a key is taken only under it.
func claimTx(ctx context.Context, conn *pgx.Conn, node int) (claimResult, error) {
	propose := newClaimKey()
	tx, err := conn.Begin(ctx)
	if err != nil {
		return claimResult{}, err
	}
	defer func() { _ = tx.Rollback(ctx) }() // no-op after Commit
	if _, err := tx.Exec(ctx, `INSERT INTO snowflake._claims (node, lock_key) VALUES ($1, $2) ON CONFLICT (node) DO NOTHING`, node, propose); err != nil {
		return claimResult{}, err
	}
	var key int64
	if err := tx.QueryRow(ctx, `SELECT lock_key FROM snowflake._claims WHERE node = $1 FOR UPDATE`, node).Scan(&key); err != nil {
		return claimResult{}, err
	}
	ok, err := tryAdvisoryLock(ctx, tx, key)
	if err != nil {
		return claimResult{}, err
	}
	var res claimResult
	if !ok {
		// Activity is read from a snapshot taken at its first use in a
		// transaction; start from a fresh one.
		if _, err := tx.Exec(ctx, `SELECT pg_catalog.pg_stat_clear_snapshot()`); err != nil {
			return claimResult{}, err
		}
		holders, err := keyHolders(ctx, tx, key)
		if err != nil {
			return claimResult{}, err
		}
		if len(holders) > 0 && holders[0].trusted {
			return claimResult{holder: &holders[0]}, nil
		}
		// No trusted holder: squatters, or a holder that let go since.
		// Either way the claim moves to a key nobody holds.
		res.squatters = holders
		if key, err = moveClaim(ctx, tx, node); err != nil {
			return claimResult{}, err
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return claimResult{}, err
	}
	res.key = key
	return res, nil
}

// moveClaim takes a fresh key and stores it in node's row.
func moveClaim(ctx context.Context, tx pgx.Tx, node int) (int64, error) {
	// A fresh random key is free unless someone holds that very number
	// already; a few draws settle it.
	for range 8 {
		key := newClaimKey()
		ok, err := tryAdvisoryLock(ctx, tx, key)
		if err != nil {
			return 0, err
		}
		if !ok {
			continue
		}
		if _, err := tx.Exec(ctx, `UPDATE snowflake._claims SET lock_key = $2 WHERE node = $1`, node, key); err != nil {
			return 0, err
		}
		return key, nil
	}
	return 0, errors.New("no free advisory lock key found for the node claim")
}

func tryAdvisoryLock(ctx context.Context, tx pgx.Tx, key int64) (bool, error) {
	var ok bool
	err := tx.QueryRow(ctx, `SELECT pg_catalog.pg_try_advisory_lock($1)`, key).Scan(&ok)
	return ok, err
}

func keyHolders(ctx context.Context, tx pgx.Tx, key int64) ([]claimHolder, error) {
	rows, err := tx.Query(ctx, holdersSQL, key)
	if err != nil {
		return nil, err
	}
	var hs []claimHolder
	for rows.Next() {
		var h claimHolder
		var pid *int32
		if err := rows.Scan(&pid, &h.role, &h.app, &h.addr, &h.trusted); err != nil {
			rows.Close()
			return nil, err
		}
		if pid != nil {
			h.pid = *pid
		}
		hs = append(hs, h)
	}
	return hs, rows.Err()
}

// shimLockBase is the high half of the shim's per-sequence advisory lock
// keys (sql/functions.sql); claim keys keep out of that range.
const shimLockBase = 0x5346

// newClaimKey draws an unpredictable key: a squatter cannot take the next
// key before a proxy does.
func newClaimKey() int64 {
	var b [8]byte
	for {
		_, _ = rand.Read(b[:]) // never fails (it crashes the program instead)
		k := int64(binary.LittleEndian.Uint64(b[:]))
		if uint32(uint64(k)>>32) != shimLockBase {
			return k
		}
	}
}

// claimState is what a heartbeat finds in the table.
type claimState int

const (
	claimHeld  claimState = iota // the row holds the key this proxy holds
	claimMoved                   // the row is missing or holds another key
	claimGone                    // the table (or the schema) is gone
)

// verifyClaim reads node's key back on the claim's own connection (which
// also tells that the connection, and with it the lock, is alive).
func verifyClaim(ctx context.Context, conn *pgx.Conn, node int, key int64) (claimState, error) {
	var cur int64
	err := conn.QueryRow(ctx, `SELECT lock_key FROM snowflake._claims WHERE node = $1`, node).Scan(&cur)
	var pe *pgconn.PgError
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return claimMoved, nil
	case errors.As(err, &pe) && (pe.Code == "42P01" || pe.Code == "3F000"):
		return claimGone, nil
	case err != nil:
		return claimHeld, err
	case cur != key:
		return claimMoved, nil
	}
	return claimHeld, nil
}
