package compat

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// ErrNodeClaimed is returned (wrapped) by Nextval when another live proxy
// holds this proxy's node on the database.
var ErrNodeClaimed = errors.New("compat: node claimed by another proxy")

// claimKeyBase tags node-claim advisory locks: the key of node N is
// claimKeyBase | N ('S','N' in the high 32 bits). The shim's per-sequence
// locks use 0x5346 ('S','F') and never collide.
const claimKeyBase int64 = 0x534E << 32

// claimTimeout bounds one claim attempt or heartbeat.
const claimTimeout = 10 * time.Second

// ClaimKey returns the advisory lock key of the claim of node.
func ClaimKey(node int) int64 { return claimKeyBase | int64(node) }

// claim is the proxy's claim of its node on one database: a session
// advisory lock held on a dedicated connection, so it disappears by itself
// if the proxy dies. A heartbeat pings the connection, re-claims after a
// reconnect and retries while someone else holds the claim.
type claim struct {
	s     *Service
	db    string
	ready chan struct{} // closed after the first attempt

	mu     sync.Mutex
	conn   *pgx.Conn // holds the lock; nil when not held
	err    error     // why the claim is not held; nil when held
	logged bool      // the conflict was logged
}

func newClaim(s *Service, db string) *claim {
	return &claim{s: s, db: db, ready: make(chan struct{})}
}

// check waits for the first attempt and reports whether the claim is held.
func (c *claim) check(ctx context.Context) error {
	select {
	case <-c.ready:
	case <-ctx.Done():
		return ctx.Err()
	}
	return c.result()
}

// settled is check without waiting: done false while the first attempt
// runs.
func (c *claim) settled() (done bool, err error) {
	select {
	case <-c.ready:
		return true, c.result()
	default:
		return false, nil
	}
}

func (c *claim) result() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// run is the claim's goroutine: first attempt, then heartbeats until the
// Service closes, when the connection (and with it the lock) is released.
func (c *claim) run() {
	defer c.s.wg.Done()
	c.attempt()
	close(c.ready)
	t := time.NewTicker(c.s.cfg.Heartbeat)
	defer t.Stop()
	for {
		select {
		case <-c.s.ctx.Done():
			c.release()
			return
		case <-t.C:
			c.heartbeat()
		}
	}
}

// heartbeat pings a held claim and re-claims one that is not held.
func (c *claim) heartbeat() {
	c.mu.Lock()
	conn := c.conn
	c.mu.Unlock()
	if conn != nil {
		ctx, cancel := context.WithTimeout(c.s.ctx, claimTimeout)
		err := conn.Ping(ctx)
		cancel()
		if err == nil {
			return
		}
		c.s.log.Warn("node claim connection lost; re-claiming", "database", c.db, "node", c.s.cfg.Node, "err", err)
		c.release()
	}
	c.attempt()
}

// attempt connects and tries to take the claim once.
func (c *claim) attempt() {
	ctx, cancel := context.WithTimeout(c.s.ctx, claimTimeout)
	defer cancel()
	node := c.s.cfg.Node
	cfg := c.s.base.ConnConfig.Copy()
	cfg.Database = c.db
	cfg.RuntimeParams["application_name"] = fmt.Sprintf("snowflake-proxy node %d claim", node)
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		c.set(nil, fmt.Errorf("compat: node claim on %q: %w", c.db, err))
		return
	}
	var ok bool
	if err := conn.QueryRow(ctx, `SELECT pg_catalog.pg_try_advisory_lock($1)`, ClaimKey(node)).Scan(&ok); err != nil {
		_ = conn.Close(ctx)
		c.set(nil, fmt.Errorf("compat: node claim on %q: %w", c.db, err))
		return
	}
	if ok {
		c.mu.Lock()
		wasConflict := c.logged
		c.logged = false
		c.mu.Unlock()
		if wasConflict {
			c.s.log.Info("node claim acquired after the other proxy went away", "database", c.db, "node", node)
		}
		c.set(conn, nil)
		return
	}
	holder := c.holder(ctx, conn, node)
	_ = conn.Close(ctx)
	err = fmt.Errorf("%w: node %d on database %q is held by %s", ErrNodeClaimed, node, c.db, holder)
	c.mu.Lock()
	first := !c.logged
	c.logged = true
	c.mu.Unlock()
	if first {
		c.s.log.Error("two proxies use the same node on one database: IDs from this proxy's fast path are disabled there until the other one stops (configure a distinct --node per proxy)",
			"database", c.db, "node", node, "holder", holder)
	}
	c.set(nil, err)
}

// holder describes the session that holds the claim, for the log.
func (c *claim) holder(ctx context.Context, conn *pgx.Conn, node int) string {
	var pid int32
	var app, addr string
	err := conn.QueryRow(ctx, `
		SELECT l.pid, coalesce(a.application_name, ''), coalesce(host(a.client_addr), 'local')
		FROM pg_catalog.pg_locks l LEFT JOIN pg_catalog.pg_stat_activity a ON a.pid = l.pid
		WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1
		  AND l.classid = $1::pg_catalog.oid AND l.objid = $2::pg_catalog.oid
		LIMIT 1`, uint32(ClaimKey(node)>>32), uint32(node)).Scan(&pid, &app, &addr)
	if err != nil {
		return "another session"
	}
	return fmt.Sprintf("backend pid %d (application_name %q, client %s)", pid, app, addr)
}

func (c *claim) set(conn *pgx.Conn, err error) {
	c.mu.Lock()
	c.conn, c.err = conn, err
	c.mu.Unlock()
}

// release closes the claim connection, which releases the lock.
func (c *claim) release() {
	c.mu.Lock()
	conn := c.conn
	c.conn = nil
	if c.err == nil {
		c.err = fmt.Errorf("compat: node claim on %q released", c.db)
	}
	c.mu.Unlock()
	if conn != nil {
		ctx, cancel := context.WithTimeout(context.Background(), claimTimeout)
		_ = conn.Close(ctx)
		cancel()
	}
}
