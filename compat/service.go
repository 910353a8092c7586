package compat

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/snowflake-proxy/snowflake-proxy/generator"
	"github.com/snowflake-proxy/snowflake-proxy/rewrite/plan"
	"github.com/snowflake-proxy/snowflake-proxy/wire"
)

// Defaults of Config's zero values.
const (
	// DefaultMaxConns bounds each per-database control pool: leases are
	// rare (one per sequence and node every LeaseDuration/2 or so).
	DefaultMaxConns = 4
	// DefaultHeartbeat is how often a held node claim is verified, and a
	// claim not held is attempted again.
	DefaultHeartbeat = 5 * time.Second
	// DefaultDatabaseIdle is how long a database's catalog watch and node
	// claim outlive their last use by a session.
	DefaultDatabaseIdle = 5 * time.Minute
)

// ErrClosed is returned by NextvalBatch after Close.
var ErrClosed = errors.New("compat: service closed")

// Config configures a Service. Zero values are documented defaults.
type Config struct {
	// ControlURL is a postgres:// URL (or key=value DSN) with the proxy's
	// control credentials. Its database is replaced by the client's database
	// for each pool. Empty: pgx defaults (PG* environment variables).
	ControlURL string
	// Logger receives errors worth a human's attention (node claim
	// conflicts and squatters, failed leases). Nil: slog.Default().
	Logger *slog.Logger
	// Node is the proxy's own node id (--node). When set (1..1023), the
	// first NextvalBatch with that node on a database claims it there
	// (claim.go). 0: no claim.
	Node int
	// LeaseDuration and RenewBefore are passed to generator.Config; zero
	// means the generator's defaults.
	LeaseDuration time.Duration
	RenewBefore   time.Duration
	// Clock is the proxy's clock, held back for the generator to the
	// server's (serverBoundClock). Nil: generator.SystemClock.
	Clock generator.Clock
	// MaxConns bounds each per-database pool. 0: DefaultMaxConns.
	MaxConns int32
	// Heartbeat is the interval between verifications of a held claim, and
	// between attempts of a claim not held. 0: DefaultHeartbeat.
	Heartbeat time.Duration
	// NodeCheck, when set, is called before every fast-path batch of
	// Node: an error (AutoNode.Check: the claim of --node auto is stale or
	// lost) refuses the batch, and the session leaves its IDs to the shim.
	// It must be cheap and must not block.
	NodeCheck func() error
	// DatabaseIdle is how long a database's catalog watch and node claim,
	// each with its connection, stay after sessions last used them (asked
	// for the catalog epochs, issued a fast-path batch), and its control
	// pool after its last lease or release; the next use starts them
	// again. 0: DefaultDatabaseIdle.
	DatabaseIdle time.Duration
}

// Service implements wire.Snowflakes: the fast path's IDs (through the
// generator and a LeaseStore on PostgreSQL) and the extension statements.
// Create it with New and stop it with Close.
type Service struct {
	cfg     Config
	log     *slog.Logger
	base    *pgxpool.Config
	gen     *generator.Generator
	store   *LeaseStore
	closing bool

	mu      sync.Mutex              // guards pools, reaping, claims, closing
	pools   map[string]*controlPool // pools.go
	reaping bool                    // reapPools runs
	claims  map[string]*claim

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup // claim heartbeats, catalog watches, reapPools

	watches sync.Map // database -> *catalogWatch (catalog_epoch.go)
	// catalogEpochs and privEpochs hand out the values of every watch's
	// catalog and privilege epochs, so that none is seen twice for a
	// database, across a watch stopped when idle and the one started
	// after it too.
	catalogEpochs, privEpochs atomic.Uint64
}

// New validates cfg and returns a Service. It opens no connection: pools
// and claims are created on first use per database.
func New(cfg Config) (*Service, error) {
	if cfg.Node < 0 || cfg.Node > generator.MaxNode {
		return nil, fmt.Errorf("compat: node %d is outside 0..%d", cfg.Node, generator.MaxNode)
	}
	if cfg.MaxConns < 0 || cfg.Heartbeat < 0 || cfg.DatabaseIdle < 0 {
		return nil, errors.New("compat: negative MaxConns, Heartbeat or DatabaseIdle")
	}
	if cfg.MaxConns == 0 {
		cfg.MaxConns = DefaultMaxConns
	}
	if cfg.Heartbeat == 0 {
		cfg.Heartbeat = DefaultHeartbeat
	}
	if cfg.DatabaseIdle == 0 {
		cfg.DatabaseIdle = DefaultDatabaseIdle
	}
	base, err := pgxpool.ParseConfig(cfg.ControlURL)
	if err != nil {
		return nil, fmt.Errorf("compat: control URL: %w", err)
	}
	base.MaxConns = cfg.MaxConns
	base.MinConns = 0
	rp := base.ConnConfig.RuntimeParams
	// A lease must be durable before the proxy uses it, whatever the
	// server's default says.
	rp["synchronous_commit"] = "on"
	if _, ok := rp["application_name"]; !ok {
		rp["application_name"] = "snowflake-proxy control"
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	s := &Service{
		cfg:    cfg,
		log:    log.With("component", "compat"),
		base:   base,
		pools:  map[string]*controlPool{},
		claims: map[string]*claim{},
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	clock := newServerBoundClock(cfg.Clock)
	s.store = &LeaseStore{pools: s, serverClock: clock.observe}
	s.gen, err = generator.New(generator.Config{
		Store:         s.store,
		Clock:         clock,
		LeaseDuration: cfg.LeaseDuration,
		RenewBefore:   cfg.RenewBefore,
		Logger:        log,
	})
	if err != nil {
		s.cancel()
		return nil, fmt.Errorf("compat: %w", err)
	}
	return s, nil
}

// NextvalBatch implements wire.Snowflakes: it fills reqs with the next
// snowflakes of their sequences in database with node bits node, as the
// calls of one statement (generator.Generator.NextBatch). It fails, and the
// session falls back to the shim, when the shim is not installed in
// database, when the server refuses the lease, or when another live proxy
// holds this proxy's node claim on database.
func (s *Service) NextvalBatch(ctx context.Context, database string, node int, reqs []generator.Request) error {
	if node == s.cfg.Node && node != 0 {
		if err := s.checkNode(); err != nil {
			return err
		}
		c, err := s.claim(database)
		if err != nil {
			return err
		}
		if err := c.check(ctx); err != nil {
			return claimError{err}
		}
	}
	if err := s.gen.NextBatch(ctx, database, node, reqs); err != nil {
		return fmt.Errorf("compat: nextval %s node %d: %w", database, node, err)
	}
	return nil
}

// TryNextvalBatch implements wire.Snowflakes: NextvalBatch without
// waiting; ok is false while the node claim is not settled or a lease is
// being renewed.
func (s *Service) TryNextvalBatch(database string, node int, reqs []generator.Request) (bool, error) {
	if node == s.cfg.Node && node != 0 {
		if err := s.checkNode(); err != nil {
			return false, err
		}
		c, err := s.claim(database)
		if err != nil {
			return false, err
		}
		if done, err := c.settled(); err != nil {
			return false, claimError{err}
		} else if !done {
			return false, nil
		}
	}
	ok, err := s.gen.TryNextBatch(database, node, reqs)
	if err != nil {
		return false, fmt.Errorf("compat: nextval %s node %d: %w", database, node, err)
	}
	return ok, nil
}

// checkNode applies Config.NodeCheck.
func (s *Service) checkNode() error {
	if s.cfg.NodeCheck == nil {
		return nil
	}
	if err := s.cfg.NodeCheck(); err != nil {
		return claimError{err}
	}
	return nil
}

// claimError marks a refusal of NextvalBatch because the node claim is not
// held, for FallbackOf; its text is the claim's.
type claimError struct{ err error }

func (e claimError) Error() string { return e.err.Error() }
func (e claimError) Unwrap() error { return e.err }

// FallbackOf implements wire.FallbackClassifier: why NextvalBatch or
// TryNextvalBatch refused, for the fast-path fallback metrics.
func (s *Service) FallbackOf(err error) wire.Fallback {
	var ce claimError
	switch {
	case errors.Is(err, ErrNodeClaimed):
		return wire.FallbackNodeConflict
	case errors.Is(err, ErrNoShim):
		return wire.FallbackNoShim
	case errors.As(err, &ce):
		return wire.FallbackNodeClaim
	}
	return wire.FallbackLeaseFailed
}

// LeaseStats returns the generator's lease counters (renewals, failures,
// callers that waited), for metrics.
func (s *Service) LeaseStats() generator.LeaseStats { return s.gen.LeaseStats() }

// FenceTicket implements wire.Snowflakes (generator.FenceTicket): the
// requests that carry the ticket get IDs from a fresh lease, which starts
// above the sequence's last_value: above what the shim issued meanwhile,
// and above a setval or ALTER SEQUENCE.
func (s *Service) FenceTicket() uint64 { return s.gen.FenceTicket() }

// ExtensionSQL implements wire.Snowflakes; see the package-level function.
func (s *Service) ExtensionSQL(op plan.SlotOp, opts *plan.ExtensionOptions) (string, error) {
	return ExtensionSQL(op, opts)
}

// ExtensionChanged tells the Service that CREATE/DROP/ALTER EXTENSION went
// through on database, so that a shim remembered as missing is looked for
// again at once, by the leases and by the node claim.
func (s *Service) ExtensionChanged(database string) {
	s.store.ForgetMissingShim(database)
	s.mu.Lock()
	c := s.claims[database]
	s.mu.Unlock()
	if c != nil {
		c.retry()
	}
}

// claim returns the node claim of database, starting it on first use.
func (s *Service) claim(database string) (*claim, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing {
		return nil, ErrClosed
	}
	if c := s.claims[database]; c != nil {
		return c, nil
	}
	c := newClaim(s, database)
	s.claims[database] = c
	s.wg.Add(1)
	go c.run()
	return c, nil
}

// Close stops the generator and the claim heartbeats, releases the claims
// and closes the pools, waiting at most until ctx is done.
func (s *Service) Close(ctx context.Context) error {
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		return nil
	}
	s.closing = true
	pools := s.pools
	s.mu.Unlock()

	err := s.gen.Close(ctx)
	s.cancel()
	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		err = errors.Join(err, fmt.Errorf("compat: close: %w", ctx.Err()))
	}
	for _, cp := range pools {
		cp.p.Close()
	}
	return err
}

// useMark tells whether something a goroutine owns (a database's catalog
// watch, its node claim) has gone unused for DatabaseIdle: users mark it,
// the owner asks at its own pace.
type useMark struct {
	used atomic.Bool // set by users (a load first: most calls only read it)
	last time.Time   // when the owner last saw used set; the owner's only
}

// mark records a use.
func (u *useMark) mark() {
	if !u.used.Load() {
		u.used.Store(true)
	}
}

// idle reports whether no use was marked since d before now, and clears
// the mark.
func (u *useMark) idle(now time.Time, d time.Duration) bool {
	if u.used.Swap(false) {
		u.last = now
		return false
	}
	return now.Sub(u.last) >= d
}
