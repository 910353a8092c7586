package app

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// The proxy's own connections (leases, node claims, the catalog watch)
// hold session state: a claim is a session advisory lock, the watch a
// LISTEN. A pooler in transaction mode runs each transaction of a client
// on whichever server connection is free, so that state would land on
// connections other clients then use, and notifications would be lost.
// Client sessions may go through such a pooler; the control connections
// must reach the server itself (--control-upstream), and the proxy checks
// both at start.

// checkSameServer makes sure that client sessions (up, through a pooler)
// and the proxy's own connections (ctl) reach one server: leases and node
// claims recorded in another server would not protect the IDs the sessions
// store. A running server is named by its postmaster's start time (to the
// microsecond).
func checkSameServer(ctx context.Context, up, ctl upstream, timeout time.Duration) error {
	if err := checkUpstream(ctx, ctl, timeout); err != nil {
		return fmt.Errorf("--control-upstream: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	started := func(u upstream) (string, error) {
		c, err := connect(ctx, u)
		if err != nil {
			return "", err
		}
		defer c.Close(ctx)
		return queryOne(ctx, c, u, "SELECT pg_catalog.pg_postmaster_start_time()::text")
	}
	s, err := started(up)
	if err != nil {
		return err
	}
	c, err := started(ctl)
	if err != nil {
		return fmt.Errorf("--control-upstream: %w", err)
	}
	if s != c {
		return fmt.Errorf("--upstream %s and --control-upstream %s reach different servers (postmasters started at %s and %s): "+
			"the control connections must reach the server the sessions use", up.display, ctl.display, s, c)
	}
	return nil
}

// checkControlDirect refuses control connections that go through a pooler
// in transaction mode. Two connections at once: the first runs a statement
// and, in transaction mode, hands its server connection back to the pool
// while it stays connected; the second, in a transaction, then gets the
// most recently used one (PgBouncer's default), the same server process.
// Without a pooler, or with one in session mode, each connection keeps a
// server process of its own while it is open. given tells whether
// --control-upstream was set, for the message.
func checkControlDirect(ctx context.Context, up upstream, given bool, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	first, err := connect(ctx, up)
	if err != nil {
		return err
	}
	defer first.Close(ctx)
	pid1, err := queryOne(ctx, first, up, "SELECT pg_catalog.pg_backend_pid()::text")
	if err != nil {
		return err
	}
	second, err := connect(ctx, up)
	if err != nil {
		return err
	}
	defer second.Close(ctx)
	pid2, err := queryOne(ctx, second, up, "BEGIN; SELECT pg_catalog.pg_backend_pid()::text; ROLLBACK")
	if err != nil {
		return err
	}
	if pid1 != pid2 {
		return nil
	}
	if given {
		return fmt.Errorf("--control-upstream %s goes through a connection pooler in transaction mode (two connections were served by one server process): "+
			"give the server's own address", up.display)
	}
	return fmt.Errorf("--upstream %s is a connection pooler in transaction mode (two connections were served by one server process): "+
		"the proxy's own connections (leases, node claims, catalog watch) need the server itself: give its address with --control-upstream", up.display)
}

// connect opens a connection with the control credentials.
func connect(ctx context.Context, u upstream) (*pgconn.PgConn, error) {
	c, err := pgconn.Connect(ctx, u.controlURL)
	if err != nil {
		return nil, &unreachableError{upstream: u.display, err: err}
	}
	return c, nil
}

// queryOne runs sql on c in the simple protocol (a pooler in transaction
// mode may run each statement of a connection on another server
// connection) and returns the first column of the last row of the last
// statement that returned rows.
func queryOne(ctx context.Context, c *pgconn.PgConn, u upstream, sql string) (string, error) {
	res, err := c.Exec(ctx, sql).ReadAll()
	if err != nil {
		return "", fmt.Errorf("upstream %s: %w", u.display, err)
	}
	for i := len(res) - 1; i >= 0; i-- {
		if len(res[i].Rows) > 0 && len(res[i].Rows[0]) > 0 {
			return string(res[i].Rows[0][0]), nil
		}
	}
	return "", fmt.Errorf("upstream %s: %q returned no row", u.display, sql)
}
