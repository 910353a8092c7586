package compat

// --node auto: a proxy claims a node id that no live proxy of the same
// server holds, in the private table snowflake_proxy.node_claims of its
// control database (the database of --upstream), and holds it while it
// lives.
//
// A claim is a row: the node, a random owner token, the server's clock at
// the owner's last heartbeat, and hold, how long after that heartbeat the
// node stays reserved. Claims are chosen in one short transaction under a
// table lock (SHARE ROW EXCLUSIVE conflicts with itself), so proxies
// starting at once take distinct nodes: the lowest node of the range whose
// row is missing or whose heartbeat + hold is past on the server's clock.
// Only roles with privileges on the table can take that lock: the table
// has none for PUBLIC.
//
// When is a node safe to reuse? The owner heartbeats every Heartbeat and
// stops using its node for new IDs (Check fails, the fast path leaves them
// to the shim) once no heartbeat has succeeded for StaleAfter, counted
// from when that heartbeat was sent, which is before the server's clock
// was read for it. Its last fast-path lease was therefore taken before
// heartbeat + StaleAfter, and that lease's positions end LeaseDuration
// later: every ID it issued has a timestamp before heartbeat + StaleAfter
// + LeaseDuration. hold adds Margin to that for the difference between
// the proxies' clocks. A proxy that crashes or hangs leaves its node
// reserved until then; a proxy that stops cleanly records a hold of
// LeaseDuration + Margin from its last ID. The next owner's IDs carry
// later timestamps, so the two never share an ID whatever sequence or
// database they come from; within one database the leases (leasestore.go)
// already keep two users of a node apart.
//
// A heartbeat that finds its row taken by another owner (after this proxy
// could not heartbeat for longer than hold) means the node is lost: the
// proxy cannot change the node of its open sessions, so the fast path
// stays off until it is restarted, and the log and /readyz say so.
//
// Claims live in one server: proxies in front of servers that replicate
// to each other (multi-master) do not see each other's claims and must
// use disjoint ranges (--node-range).

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/snowflake-proxy/snowflake-proxy/generator"
)

// Defaults of AutoNodeConfig.
const (
	DefaultNodeHeartbeat  = time.Second
	DefaultNodeStaleAfter = 5 * time.Second
	DefaultNodeMargin     = 3 * time.Second
)

var (
	// ErrNoFreeNode is returned by ClaimNode when every node of the
	// range is held.
	ErrNoFreeNode = errors.New("compat: no free node")
	// ErrNodeClaimLost is returned (wrapped) by AutoNode.Check once
	// another proxy took the node over.
	ErrNodeClaimLost = errors.New("compat: node claim taken over by another proxy")
	// ErrNodeClaimStale is returned (wrapped) by AutoNode.Check while no
	// heartbeat has succeeded for StaleAfter.
	ErrNodeClaimStale = errors.New("compat: node claim not renewed")
)

// AutoNodeConfig configures ClaimNode. Zero values are documented
// defaults.
type AutoNodeConfig struct {
	// ControlURL is the proxy's control connection string; the claims
	// live in its database.
	ControlURL string
	// Min and Max bound the nodes claimed (--node-range). 0: 1 and 1023.
	Min, Max int
	// LeaseDuration is the generator's (generator.Config.LeaseDuration).
	// 0: generator.DefaultLeaseDuration.
	LeaseDuration time.Duration
	// Heartbeat, StaleAfter and Margin: see the comment at the top of
	// autonode.go. 0: the Default* constants. StaleAfter must exceed
	// Heartbeat.
	Heartbeat, StaleAfter, Margin time.Duration
	// Holder describes the proxy in the table, for humans. Empty: the
	// host name and process id.
	Holder string
	// Logger: nil means slog.Default().
	Logger *slog.Logger
}

// AutoNode is a node claimed by ClaimNode, held until Close.
type AutoNode struct {
	cfg   AutoNodeConfig
	log   *slog.Logger
	pool  *pgxpool.Pool
	node  int
	owner string
	hold  time.Duration

	base       time.Time    // monotonic origin of validUntil
	validUntil atomic.Int64 // ns since base: Check fails from then on
	lost       atomic.Bool
	failing    bool // heartbeat goroutine only: the last heartbeat failed

	cancel    context.CancelFunc
	done      chan struct{}
	closeOnce sync.Once
}

// nodeClaimsSQL creates the table of claims, as one multi-statement Query
// (one implicit transaction: the table never exists with PUBLIC privileges
// or without its comment).
var nodeClaimsSQL = `CREATE SCHEMA IF NOT EXISTS snowflake_proxy;
CREATE TABLE snowflake_proxy.node_claims (
	node pg_catalog.int4 PRIMARY KEY CHECK (node BETWEEN 1 AND 1023),
	owner pg_catalog.text NOT NULL,
	heartbeat pg_catalog.timestamptz NOT NULL,
	hold pg_catalog.interval NOT NULL,
	holder pg_catalog.text NOT NULL
);
REVOKE ALL ON TABLE snowflake_proxy.node_claims FROM PUBLIC;
` + privateTableSQL("snowflake_proxy.node_claims") + `
COMMENT ON TABLE snowflake_proxy.node_claims IS 'snowflake-proxy --node auto: the node each proxy holds; a node is free once heartbeat + hold is past'`

// freeNodeSQL picks the lowest free node of $1..$2 (under the table lock).
const freeNodeSQL = `SELECT n FROM pg_catalog.generate_series($1::pg_catalog.int4, $2::pg_catalog.int4) AS n
WHERE NOT EXISTS (SELECT FROM snowflake_proxy.node_claims c
                  WHERE c.node = n AND c.heartbeat OPERATOR(pg_catalog.+) c.hold OPERATOR(pg_catalog.>) pg_catalog.clock_timestamp())
ORDER BY n LIMIT 1`

const takeNodeSQL = `INSERT INTO snowflake_proxy.node_claims (node, owner, heartbeat, hold, holder)
VALUES ($1, $2, pg_catalog.clock_timestamp(), pg_catalog.make_interval(secs => $3::pg_catalog.float8), $4)
ON CONFLICT (node) DO UPDATE SET owner = EXCLUDED.owner, heartbeat = EXCLUDED.heartbeat, hold = EXCLUDED.hold, holder = EXCLUDED.holder`

// beatSQL renews the claim; with $3 not NULL it also sets its hold (at
// Close).
const beatSQL = `UPDATE snowflake_proxy.node_claims SET heartbeat = pg_catalog.clock_timestamp(),
	hold = coalesce(pg_catalog.make_interval(secs => $3::pg_catalog.float8), hold)
WHERE node = $1 AND owner = $2`

// ClaimNode claims the lowest free node of the range in the control
// database and keeps it with a heartbeat until Close. It fails with
// ErrNoFreeNode when every node of the range is held.
func ClaimNode(ctx context.Context, cfg AutoNodeConfig) (*AutoNode, error) {
	if cfg.Min == 0 && cfg.Max == 0 {
		cfg.Min, cfg.Max = 1, generator.MaxNode
	}
	if cfg.Min < 1 || cfg.Max > generator.MaxNode || cfg.Min > cfg.Max {
		return nil, fmt.Errorf("compat: node range %d-%d is not within 1-%d", cfg.Min, cfg.Max, generator.MaxNode)
	}
	if cfg.LeaseDuration == 0 {
		cfg.LeaseDuration = generator.DefaultLeaseDuration
	}
	if cfg.Heartbeat == 0 {
		cfg.Heartbeat = DefaultNodeHeartbeat
	}
	if cfg.StaleAfter == 0 {
		cfg.StaleAfter = DefaultNodeStaleAfter
	}
	if cfg.Margin == 0 {
		cfg.Margin = DefaultNodeMargin
	}
	if cfg.StaleAfter <= cfg.Heartbeat {
		return nil, fmt.Errorf("compat: node claim: StaleAfter %v must exceed Heartbeat %v", cfg.StaleAfter, cfg.Heartbeat)
	}
	if cfg.Holder == "" {
		host, _ := os.Hostname()
		cfg.Holder = fmt.Sprintf("%s pid %d", host, os.Getpid())
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	pcfg, err := pgxpool.ParseConfig(cfg.ControlURL)
	if err != nil {
		return nil, fmt.Errorf("compat: node claim: control URL: %w", err)
	}
	pcfg.MaxConns, pcfg.MinConns = 1, 0
	pcfg.ConnConfig.RuntimeParams["application_name"] = "snowflake-proxy node claim"
	// The claim must be durable before the proxy issues with its node.
	pcfg.ConnConfig.RuntimeParams["synchronous_commit"] = "on"
	pool, err := pgxpool.NewWithConfig(context.Background(), pcfg)
	if err != nil {
		return nil, fmt.Errorf("compat: node claim: %w", err)
	}
	var b [16]byte
	_, _ = rand.Read(b[:])
	a := &AutoNode{cfg: cfg, log: log.With("component", "compat"), pool: pool, owner: hex.EncodeToString(b[:]),
		hold: cfg.StaleAfter + cfg.LeaseDuration + cfg.Margin, base: time.Now(), done: make(chan struct{})}
	if err := a.claim(ctx); err != nil {
		pool.Close()
		return nil, err
	}
	var hctx context.Context
	hctx, a.cancel = context.WithCancel(context.Background())
	go a.run(hctx)
	return a, nil
}

// claim creates the table when missing and takes a free node.
func (a *AutoNode) claim(ctx context.Context) error {
	var exists bool
	if err := a.pool.QueryRow(ctx, `SELECT pg_catalog.to_regclass('snowflake_proxy.node_claims') IS NOT NULL`).Scan(&exists); err != nil {
		return fmt.Errorf("compat: node claim: %w", err)
	}
	if !exists {
		if err := a.createTable(ctx); err != nil {
			return err
		}
	}
	sent := time.Since(a.base)
	err := pgx.BeginFunc(ctx, a.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `LOCK TABLE snowflake_proxy.node_claims IN SHARE ROW EXCLUSIVE MODE`); err != nil {
			return err
		}
		if err := tx.QueryRow(ctx, freeNodeSQL, a.cfg.Min, a.cfg.Max).Scan(&a.node); err != nil {
			if errors.Is(err, pgx.ErrNoRows) {
				return fmt.Errorf("%w in %d-%d: each is held by a live proxy, or was left less than its hold ago (see snowflake_proxy.node_claims in the control database)",
					ErrNoFreeNode, a.cfg.Min, a.cfg.Max)
			}
			return err
		}
		_, err := tx.Exec(ctx, takeNodeSQL, a.node, a.owner, a.hold.Seconds(), a.cfg.Holder)
		return err
	})
	if err != nil {
		return fmt.Errorf("compat: node claim: %w", nodeClaimsErr(err))
	}
	a.validUntil.Store(int64(sent + a.cfg.StaleAfter))
	return nil
}

// createTable creates the claims table. Another proxy creating it at the
// same moment makes this fail (duplicate schema, table or type, or a
// unique violation in the catalog); then it exists, which is checked, not
// assumed.
func (a *AutoNode) createTable(ctx context.Context) error {
	_, err := a.pool.Exec(ctx, nodeClaimsSQL, pgx.QueryExecModeSimpleProtocol)
	var pe *pgconn.PgError
	if errors.As(err, &pe) && (pe.Code == "42P06" || pe.Code == "42P07" || pe.Code == "42710" || pe.Code == "23505") {
		var exists bool
		if qerr := a.pool.QueryRow(ctx, `SELECT pg_catalog.to_regclass('snowflake_proxy.node_claims') IS NOT NULL`).Scan(&exists); qerr == nil && exists {
			return nil
		}
	}
	if err != nil {
		return fmt.Errorf("compat: node claim: creating snowflake_proxy.node_claims: %w", nodeClaimsErr(err))
	}
	return nil
}

// nodeClaimsErr says what the control role lacks when it lacks privileges.
func nodeClaimsErr(err error) error {
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == "42501" {
		return fmt.Errorf("the control role may not create or use snowflake_proxy.node_claims in the control database "+
			"(it needs CREATE on that database, or SELECT, INSERT, UPDATE on the table and USAGE on its schema): %w", err)
	}
	return err
}

// Node is the claimed node.
func (a *AutoNode) Node() int { return a.node }

// Check returns nil while the claim is current: renewed less than
// StaleAfter ago and not taken over. compat.Service calls it before every
// fast-path batch of the node (Config.NodeCheck): one atomic load and one
// clock reading.
func (a *AutoNode) Check() error {
	if a.lost.Load() {
		return fmt.Errorf("%w: node %d (restart the proxy to claim another)", ErrNodeClaimLost, a.node)
	}
	if time.Since(a.base) >= time.Duration(a.validUntil.Load()) {
		return fmt.Errorf("%w for %v: node %d", ErrNodeClaimStale, a.cfg.StaleAfter, a.node)
	}
	return nil
}

// run heartbeats until ctx ends.
func (a *AutoNode) run(ctx context.Context) {
	defer close(a.done)
	t := time.NewTicker(a.cfg.Heartbeat)
	defer t.Stop()
	for !a.lost.Load() {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		a.beat(ctx)
	}
}

// beat renews the claim once, within StaleAfter.
func (a *AutoNode) beat(ctx context.Context) {
	sent := time.Since(a.base)
	ctx, cancel := context.WithTimeout(ctx, a.cfg.StaleAfter)
	defer cancel()
	tag, err := a.pool.Exec(ctx, beatSQL, a.node, a.owner, nil)
	switch {
	case err != nil:
		if ctx.Err() != nil && errors.Is(err, context.Canceled) {
			return // Close
		}
		if !a.failing {
			a.failing = true
			a.log.Warn("node claim heartbeat failed; fast-path IDs stop if it keeps failing", "node", a.node,
				"stale_after", a.cfg.StaleAfter.String(), "err", err)
		}
	case tag.RowsAffected() == 0:
		a.lost.Store(true)
		a.log.Error("this proxy's node was claimed by another proxy after its heartbeats failed for longer than the claim's hold: "+
			"fast-path IDs are off until the proxy is restarted", "node", a.node, "hold", a.hold.String())
	default:
		a.validUntil.Store(int64(sent + a.cfg.StaleAfter))
		if a.failing {
			a.failing = false
			a.log.Info("node claim heartbeat succeeded again", "node", a.node)
		}
	}
}

// Close stops the heartbeat and leaves the node reserved for LeaseDuration
// + Margin from now, then free: call it after the last fast-path ID (after
// compat.Service.Close).
func (a *AutoNode) Close(ctx context.Context) error {
	var err error
	a.closeOnce.Do(func() {
		a.cancel()
		<-a.done
		if !a.lost.Load() {
			_, err = a.pool.Exec(ctx, beatSQL, a.node, a.owner, (a.cfg.LeaseDuration + a.cfg.Margin).Seconds())
			if err != nil {
				err = fmt.Errorf("compat: releasing node %d: %w", a.node, err)
			}
		}
		a.pool.Close()
	})
	return err
}
