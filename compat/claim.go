package compat

// The node claim: how a proxy learns that another live proxy uses its
// --node on the same database, in a way no other database role can fake or
// block.
//
// A claim is a session advisory lock, held on a dedicated control
// connection per database, so it disappears with the proxy, or when no
// fast-path batch has asked for it there for DatabaseIdle (stopIfIdle).
// Advisory locks share one namespace open to every role, and pg_locks
// shows every held key to every role, so the key itself cannot be a
// secret: a fixed key (or one derived from a secret) lets any role take
// it first and make the proxy believe another proxy runs, which turned
// its fast path off. So the decision rests on privileges, not on the key:
//
//   - the key of node N is a random 64-bit number kept in the private table
//     snowflake._claims (claimdb.go), which only the proxies' control roles
//     read and write (no privilege for PUBLIC). Only a control connection
//     creates it, after the shim is installed, never inside a client's
//     transaction;
//   - a proxy claims in one short transaction that locks the node's row
//     (SELECT ... FOR UPDATE), so claims of one node are serialised, and
//     takes the advisory lock on the row's key with pg_try_advisory_lock;
//   - when another session holds that key, pg_locks and pg_stat_activity
//     (readable by every role) name its role. If that role may UPDATE the
//     table (itself or through a role it may SET ROLE to) it is trusted:
//     another proxy (or an administrator), a real conflict, reported as
//     before. Otherwise it is a squatter: the proxy takes a fresh random
//     key, stores it in the row and goes on, logging a warning that names
//     the squatter;
//   - while a proxy holds its key, its heartbeat reads the row back; when
//     the key there is no longer its own (the table was dropped with the
//     shim and created again, or a privileged role changed it) it lets go
//     and claims again, so that proxies never hold different keys for one
//     node for longer than a heartbeat.
//
// What a role without privileges on the table can do: read a key from
// pg_locks while a proxy holds it, queue for it and hold it after that
// proxy stops, hold any other key. All this costs the next proxy one key
// rotation and a warning in its log; it cannot keep a proxy's claim from
// succeeding, cannot stop it from seeing a real conflict (it never holds
// the current key while a proxy does: locks are exclusive), and cannot make
// it report a conflict, because only a holder whose role may UPDATE the
// table counts as a proxy. It cannot predict the next key (crypto/rand) nor
// change the row. A session that takes a key while a proxy holds the row
// lock cannot be a proxy (proxies take keys only under that row lock), so
// judging holders by their role is safe even when holders come and go.
//
// A role that may UPDATE the table is trusted with the claim by
// construction: it could as well rewrite the key. The table has no
// privilege for PUBLIC; roles granted privileges on it by default
// privileges or by hand are trusted too.
//
// DROP EXTENSION drops the table with the shim (sql/drop.sql); the next
// heartbeat finds it gone and claims again once the shim is back.
//
// Without the shim there is no fast path and no claim: the claim reports
// ErrNoShim and tries again (at the next heartbeat, or at the next Nextval
// after noShimBackoff). A control role that can neither create the table
// (CREATE on schema snowflake: a superuser, the schema's owner or a grant)
// nor use an existing one cannot claim its node: the fast path stays off on
// that database and the reason is logged once at ERROR.

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// ErrNodeClaimed is returned (wrapped) by NextvalBatch when another live proxy
// holds this proxy's node on the database.
var ErrNodeClaimed = errors.New("compat: node claim held by another proxy")

// claimTimeout bounds one claim attempt or heartbeat.
const claimTimeout = 10 * time.Second

// claim is the proxy's claim of its node on one database. Its goroutine
// (run) makes the first attempt, then at each heartbeat verifies a held
// claim or attempts again.
type claim struct {
	s    *Service
	db   string
	kick chan struct{} // capacity 1: attempt or verify now

	mu sync.Mutex
	// ready is closed after the first attempt started at generation gen or
	// later; pending is true until then. retry bumps gen, so that callers
	// wait for an attempt that sees what changed.
	ready   chan struct{}
	pending bool
	gen     uint64
	stopped bool      // the goroutine is gone: nothing closes a new ready
	conn    *pgx.Conn // holds the lock on key; nil when not held
	key     int64
	err     error     // why the claim is not held; nil when held
	last    time.Time // end of the last attempt
	// reported is the kind of problem logged at ERROR ("conflict",
	// "table"), so each is logged once until the claim is held again.
	reported string
	// beats counts heartbeats (verifications and attempts), attempts the
	// attempts among them; for tests.
	beats, attempts int
	// use is marked by every check and settled (a fast-path batch), under
	// mu; the goroutine stops the claim once it has gone unmarked for
	// DatabaseIdle (stopIfIdle).
	use useMark
}

func newClaim(s *Service, db string) *claim {
	return &claim{s: s, db: db, kick: make(chan struct{}, 1), ready: make(chan struct{}), pending: true,
		use: useMark{last: time.Now()}}
}

// check waits for the current attempt and reports whether the claim is
// held.
func (c *claim) check(ctx context.Context) error {
	c.mu.Lock()
	c.use.mark()
	c.retryNoShimLocked()
	ready := c.ready
	c.mu.Unlock()
	select {
	case <-ready:
	case <-ctx.Done():
		return ctx.Err()
	}
	return c.result()
}

// settled is check without waiting: done false while an attempt that
// callers wait for runs.
func (c *claim) settled() (done bool, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.use.mark()
	c.retryNoShimLocked()
	if c.pending {
		return false, nil
	}
	return true, c.err
}

func (c *claim) result() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// retry makes callers wait for a new attempt when the claim is not held
// (the shim may have appeared), and has a held claim verified now.
func (c *claim) retry() {
	c.mu.Lock()
	if c.conn == nil {
		c.rearmLocked()
	}
	c.mu.Unlock()
	c.nudge()
}

// retryNoShimLocked starts a new attempt on demand when the last one found
// no shim, at most every noShimBackoff: a shim installed meanwhile is then
// found at the next use, not at the next heartbeat.
func (c *claim) retryNoShimLocked() {
	if c.pending || !errors.Is(c.err, ErrNoShim) || time.Since(c.last) < noShimBackoff {
		return
	}
	c.rearmLocked()
	c.nudge()
}

func (c *claim) rearmLocked() {
	if c.stopped {
		return
	}
	c.gen++
	if !c.pending {
		c.ready = make(chan struct{})
		c.pending = true
	}
}

func (c *claim) nudge() {
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

// done records the end of an attempt that started at generation gen.
func (c *claim) done(gen uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.last = time.Now()
	if c.pending && gen == c.gen {
		close(c.ready)
		c.pending = false
	}
}

// run is the claim's goroutine: attempts and heartbeats until the Service
// closes or no fast-path batch has used the claim for DatabaseIdle, when
// the connection (and with it the lock) is released.
func (c *claim) run() {
	defer c.s.wg.Done()
	t := time.NewTicker(c.s.cfg.Heartbeat)
	defer t.Stop()
	for {
		c.mu.Lock()
		gen := c.gen
		c.mu.Unlock()
		c.heartbeat()
		c.done(gen)
		if c.stopIfIdle(time.Now()) {
			return
		}
		select {
		case <-c.s.ctx.Done():
			c.stop()
			return
		case <-t.C:
		case <-c.kick:
		}
	}
}

// stopIfIdle stops a claim that no fast-path batch has used for
// DatabaseIdle before now, so that a proxy does not keep a connection to
// every database it ever issued IDs in (regression). It is marked stopped
// in the section that decides it, under the lock every caller takes to
// find it: a batch that found it, before or until it leaves the map, gets
// the error and goes to the shim. It lets go of the lock on the server
// before it leaves the map: the next batch starts a new claim, waiting
// for it as at the first use, which must not find this proxy's own
// connection holding the key (a conflict with itself). While none holds
// the node, another proxy configured with it may take it; this one then
// reports the conflict when it claims again.
func (c *claim) stopIfIdle(now time.Time) bool {
	c.s.mu.Lock()
	c.mu.Lock()
	idle := c.use.idle(now, c.s.cfg.DatabaseIdle) && c.s.claims[c.db] == c
	if idle {
		c.stopLocked(fmt.Errorf("compat: node claim on %q released: unused for %s", c.db, c.s.cfg.DatabaseIdle))
	}
	c.mu.Unlock()
	c.s.mu.Unlock()
	if !idle {
		return false
	}
	c.release()
	c.s.mu.Lock()
	if c.s.claims[c.db] == c {
		delete(c.s.claims, c.db)
	}
	c.s.mu.Unlock()
	return true
}

// stop releases the claim for good (the Service closes).
func (c *claim) stop() {
	c.release()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.stopLocked(nil)
}

// stopLocked marks the claim stopped: callers waiting for an attempt get
// err (or the claim's own when nil) and none starts again. c.mu is held.
func (c *claim) stopLocked(err error) {
	c.stopped = true
	if err != nil {
		c.err = err
	}
	if c.pending {
		close(c.ready)
		c.pending = false
	}
}

// heartbeat verifies a held claim and attempts one that is not held.
func (c *claim) heartbeat() {
	c.mu.Lock()
	c.beats++
	conn, key := c.conn, c.key
	c.mu.Unlock()
	if conn != nil {
		ctx, cancel := context.WithTimeout(c.s.ctx, claimTimeout)
		st, err := verifyClaim(ctx, conn, c.s.cfg.Node, key)
		cancel()
		switch {
		case err != nil:
			c.s.log.Warn("node claim connection lost; claiming again", "database", c.db, "node", c.s.cfg.Node, "err", err)
		case st == claimGone:
			c.s.log.Info("node claim table is gone (DROP EXTENSION?); claiming again", "database", c.db, "node", c.s.cfg.Node)
		case st == claimMoved:
			c.s.log.Warn("node claim key was changed in snowflake._claims; claiming again", "database", c.db, "node", c.s.cfg.Node)
		default:
			return
		}
		c.release()
	}
	c.attempt()
}

// attempt connects and tries to take the claim once.
func (c *claim) attempt() {
	c.mu.Lock()
	c.attempts++
	c.mu.Unlock()
	ctx, cancel := context.WithTimeout(c.s.ctx, claimTimeout)
	defer cancel()
	node := c.s.cfg.Node
	cfg := c.s.base.ConnConfig.Copy()
	cfg.Database = c.db
	cfg.RuntimeParams["application_name"] = fmt.Sprintf("snowflake-proxy node %d claim", node)
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		c.set(nil, 0, fmt.Errorf("compat: node claim on %q: %w", c.db, err))
		return
	}
	res, err := takeClaim(ctx, conn, node)
	if err != nil {
		closeConn(conn)
		if errors.Is(err, ErrNoShim) {
			c.set(nil, 0, fmt.Errorf("%w (database %q): no node claim without the shim", ErrNoShim, c.db))
			return
		}
		err = fmt.Errorf("compat: node claim on %q: %w", c.db, err)
		if errors.Is(err, errClaimTable) && c.report("table") {
			c.s.log.Error("this proxy cannot claim its node: IDs from its fast path are disabled on this database until its control role may create snowflake._claims (CREATE on schema snowflake) or use it (SELECT, INSERT, UPDATE)",
				"database", c.db, "node", node, "err", err)
		}
		c.set(nil, 0, err)
		return
	}
	for _, h := range res.squatters {
		c.s.log.Warn("a session whose role may not use snowflake._claims held this node's claim key; the claim moved to a new key (such a role can neither block nor fake the claim)",
			"database", c.db, "node", node, "squatter", h.String())
	}
	if res.holder != nil {
		closeConn(conn)
		err = fmt.Errorf("%w: node %d on database %q is held by %s", ErrNodeClaimed, node, c.db, res.holder)
		if c.report("conflict") {
			c.s.log.Error("two proxies use the same node on one database: IDs from this proxy's fast path are disabled there until the other one stops (configure a distinct --node per proxy)",
				"database", c.db, "node", node, "holder", res.holder.String())
		}
		c.set(nil, 0, err)
		return
	}
	c.mu.Lock()
	wasConflict := c.reported == "conflict"
	c.reported = ""
	c.mu.Unlock()
	if wasConflict {
		c.s.log.Info("node claim acquired after the other proxy went away", "database", c.db, "node", node)
	}
	c.set(conn, res.key, nil)
}

// report records that a problem of kind is logged and says whether it is
// new (not logged since the claim was last held).
func (c *claim) report(kind string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.reported == kind {
		return false
	}
	c.reported = kind
	return true
}

func (c *claim) set(conn *pgx.Conn, key int64, err error) {
	c.mu.Lock()
	c.conn, c.key, c.err = conn, key, err
	c.mu.Unlock()
}

// release lets go of the lock (pg_advisory_unlock_all: at once, where
// closing the connection releases it only once the backend has exited)
// and closes the claim connection.
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
		_, _ = conn.Exec(ctx, "SELECT pg_catalog.pg_advisory_unlock_all()")
		_ = conn.Close(ctx)
		cancel()
	}
}

func closeConn(conn *pgx.Conn) {
	ctx, cancel := context.WithTimeout(context.Background(), claimTimeout)
	_ = conn.Close(ctx)
	cancel()
}
