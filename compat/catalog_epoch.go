package compat

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/snowflake-proxy/snowflake-proxy/generator"
)

// Catalog epochs: how sessions learn about DDL made elsewhere.
//
// Sessions cache, per database, which columns default to snowflake.nextval
// (wire/defaults.go). DDL through the proxy invalidates a session's own
// cache; DDL from another session, another proxy or a direct connection is
// reported by the shim's event triggers (sql/events.sql: ddl_command_end and
// sql_drop run pg_notify(NotifyChannel)). One control connection per
// database LISTENs on that channel; every notification moves the
// database's epoch, and a session whose cache was built at another epoch
// drops it. What fires no event trigger (role memberships, superuser
// status; without the triggers, grants) moves a second epoch, the
// privilege epoch (privilege_epoch.go).
//
// The epoch is 0, "changes cannot be seen", whenever the watch is not both
// listening and sure that both event triggers exist and are enabled: before
// the first check, while the control connection is down (notifications sent
// meanwhile are lost, so a new epoch is issued once it is back), and in a
// database whose shim was installed by a non-superuser (PostgreSQL lets only
// superusers create event triggers). Sessions then leave column defaults to
// the server's shim: slower, always correct. No expiry time would be
// correct instead: a default changed elsewhere would be filled with
// snowflakes until it ran out.
//
// Known window: a notification arrives shortly after the DDL commits; an
// INSERT sent through the proxy within that window (microseconds to a few
// milliseconds) may still be filled with the old default.

// Timing of a watch.
const (
	// epochRecheck is how often an armed watch checks that the event
	// triggers are still there (DROP EVENT TRIGGER and ALTER EVENT TRIGGER
	// fire no event trigger themselves).
	epochRecheck = 10 * time.Second
	// epochIdleRecheck is how often an unarmed watch looks for the event
	// triggers (the shim may be installed at any time); a session asking
	// for the epoch of an unarmed database wakes it sooner.
	epochIdleRecheck = 2 * time.Second
	// epochRetry is the pause after a failed control connection.
	epochRetry = time.Second
	// epochQueryTimeout bounds the connection and each check.
	epochQueryTimeout = 10 * time.Second
	// epochMinGap is the least time between two moves of the epoch. Any
	// role may NOTIFY the channel, and DDL on temporary objects notifies
	// too: every move makes each session read its caches again and the
	// watch run its two queries, so a flood of notifications stalled every
	// session (regression). Notifications that arrive within the gap are
	// taken as one.
	epochMinGap = 10 * time.Millisecond
	// epochDrainWait is how long a drain waits for more notifications.
	epochDrainWait = time.Millisecond
)

// makeBlocksSQL makes missing per-row blocks for the node $1 (NULL: the
// proxy has none) and those the database's settings name, yielding to DDL
// (ddlyield.go); that bounds its wait for a role that may setval a
// sequence and holds it in an open transaction too.
const makeBlocksSQL = `SELECT snowflake._blocks_all($1::pg_catalog.int4) FROM ` + yieldToDDL

// eventTriggersSQL counts the shim's enabled event triggers.
const eventTriggersSQL = `SELECT count(*) FROM pg_catalog.pg_event_trigger
	WHERE evtname IN ('snowflake_ddl_notify', 'snowflake_ddl_drop') AND evtenabled IN ('O', 'A')`

// catalogWatch is the LISTEN connection of one database.
type catalogWatch struct {
	s  *Service
	db string
	// cur is the epoch sessions see, 0 when not armed. Every arming and
	// every notification gives it a new value from Service.catalogEpochs,
	// so an epoch is never seen twice.
	cur   atomic.Uint64
	nudge chan struct{} // capacity 1: a session saw epoch 0
	// use is marked by every session that asks for the epochs; the watch
	// stops once it has gone unmarked for DatabaseIdle (idle).
	use useMark
	// checks counts the completed looks for the event triggers, each
	// applied to cur, so that tests can wait for a check instead of
	// guessing how long one takes.
	checks atomic.Uint64
	// blocksLogged is set once makeBlocks has logged a failure; only the
	// watch's goroutine touches it.
	blocksLogged bool
	// runs counts makeBlocks' runs, for AwaitBlocks.
	runs blockRuns
	// privs is the privilege epoch (privilege_epoch.go): it moves with cur
	// and when the privileges' fingerprint changes; 0 while the watch is
	// not connected. Its values come from Service.privEpochs.
	privs atomic.Uint64
	// lastMove is when wait last moved the epoch; fingerprint is the
	// latest fingerprint of the privileges, nextPoll when it is read
	// again. The watch's goroutine only.
	lastMove    time.Time
	fingerprint string
	nextPoll    time.Time
}

// errWatchIdle ends a watch that no session has asked for its epochs for
// DatabaseIdle.
var errWatchIdle = errors.New("compat: catalog watch idle")

// CatalogEpochs implements wire.Snowflakes: the current catalog epoch of
// database, 0 when DDL made elsewhere cannot be seen there (see above),
// and its privilege epoch (privilege_epoch.go). The first call for a
// database starts its watch and returns zeros. It does not block: one map
// lookup and two atomic loads, the catalog epoch first (the watch moves
// the privilege epoch first).
func (s *Service) CatalogEpochs(database string) (catalog, privilege uint64) {
	v, ok := s.watches.Load(database)
	if !ok {
		s.startWatch(database)
		return 0, 0
	}
	w := v.(*catalogWatch)
	w.use.mark()
	catalog = w.cur.Load()
	if catalog == 0 {
		select {
		case w.nudge <- struct{}{}:
		default:
		}
	}
	return catalog, w.privs.Load()
}

// CatalogEpoch is the catalog epoch of CatalogEpochs.
func (s *Service) CatalogEpoch(database string) uint64 {
	catalog, _ := s.CatalogEpochs(database)
	return catalog
}

// CatalogWatches returns, for each database whose watch runs (started at
// a CatalogEpochs there, stopped after DatabaseIdle without one), whether
// it is armed: DDL made elsewhere is seen there, and sessions take INSERT
// defaults on the fast path. It never waits, for metrics.
func (s *Service) CatalogWatches() map[string]bool {
	out := map[string]bool{}
	s.watches.Range(func(k, v any) bool {
		out[k.(string)] = v.(*catalogWatch).cur.Load() != 0
		return true
	})
	return out
}

func (s *Service) startWatch(database string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing {
		return
	}
	w := &catalogWatch{s: s, db: database, nudge: make(chan struct{}, 1), use: useMark{last: time.Now()}}
	if _, loaded := s.watches.LoadOrStore(database, w); loaded {
		return
	}
	s.wg.Add(1)
	go w.run()
}

// run is the watch's goroutine: connect, listen, and repeat after
// failures until the Service closes or no session has asked for the
// epochs for DatabaseIdle. An idle watch leaves the map with its connection
// closed, so that a proxy that served many databases does not hold a
// connection to each for ever (regression); the next session to ask
// starts another, at epoch 0 until it is armed, as at the first start.
func (w *catalogWatch) run() {
	defer w.s.wg.Done()
	logged := false
	for {
		err := w.listen()
		w.cur.Store(0)
		w.privs.Store(0)
		if w.s.ctx.Err() != nil {
			return
		}
		if errors.Is(err, errWatchIdle) || w.idle(time.Now()) {
			w.s.watches.CompareAndDelete(w.db, w)
			return
		}
		if !logged {
			// Once per watch: a database the control role cannot reach
			// would otherwise log every second.
			if isReadOnlyServer(err) {
				w.s.log.Warn("server is read-only (a hot standby?): column defaults go to the server, which refuses writes, until it is promoted",
					"database", w.db, "err", err)
			} else {
				w.s.log.Warn("catalog watch failed; column defaults go to the server until it is back",
					"database", w.db, "err", err)
			}
			logged = true
		}
		select {
		case <-w.s.ctx.Done():
			return
		case <-time.After(epochRetry):
		}
	}
}

// listen runs one control connection until it fails.
func (w *catalogWatch) listen() error {
	ctx := w.s.ctx
	cctx, cancel := context.WithTimeout(ctx, epochQueryTimeout)
	cfg := w.s.base.ConnConfig.Copy()
	cfg.Database = w.db
	cfg.RuntimeParams["application_name"] = "snowflake-proxy catalog watch"
	conn, err := pgx.ConnectConfig(cctx, cfg)
	if err == nil {
		_, err = conn.Exec(cctx, "LISTEN "+NotifyChannel)
	}
	cancel()
	if err != nil {
		if conn != nil {
			_ = conn.Close(context.Background())
		}
		return fmt.Errorf("compat: catalog watch on %q: %w", w.db, err)
	}
	defer func() {
		// Nothing is seen from here: sessions stop using the epochs
		// before the connection closes, which may take a while.
		w.cur.Store(0)
		w.privs.Store(0)
		cctx, cancel := context.WithTimeout(context.Background(), epochQueryTimeout)
		_ = conn.Close(cctx)
		cancel()
	}()
	for first := true; ; first = false {
		armed, err := w.check(conn)
		if err != nil {
			return err
		}
		if first {
			// Read before the epochs are issued: a change after it moves
			// them.
			if _, err := w.privilegesChanged(conn); err != nil {
				return err
			}
			w.movePrivs()
		}
		w.makeBlocks(conn)
		wait := epochIdleRecheck
		if armed {
			wait = epochRecheck
			if w.cur.Load() == 0 {
				// Whatever happened before this point was not seen. The
				// privilege epoch first: who sees the new catalog epoch
				// sees the new privilege epoch too.
				w.movePrivs()
				w.cur.Store(w.s.catalogEpochs.Add(1))
			}
		} else {
			w.cur.Store(0)
		}
		w.checks.Add(1)
		if err := w.waitPolling(conn, wait, armed); err != nil {
			return err
		}
	}
}

// idle reports whether no session has asked for the epochs since
// DatabaseIdle before now.
func (w *catalogWatch) idle(now time.Time) bool { return w.use.idle(now, w.s.cfg.DatabaseIdle) }

// check reports whether both event triggers exist and are enabled.
func (w *catalogWatch) check(conn *pgx.Conn) (bool, error) {
	ctx, cancel := context.WithTimeout(w.s.ctx, epochQueryTimeout)
	defer cancel()
	var n int
	if err := conn.QueryRow(ctx, eventTriggersSQL).Scan(&n); err != nil {
		return false, fmt.Errorf("compat: catalog watch on %q: %w", w.db, err)
	}
	return n == 2, nil
}

// makeBlocks has the shim make the blocks of the per-row path
// (docs/state-model.md, "Blocks") for the sequences of snowflake column
// defaults that have none, so that per-row calls on them, direct
// connections' included, need not run the slow path. It runs at every check
// and after DDL made elsewhere, committed at once, while the watch runs
// (sessions use the database through the proxy). A shim without blocks, a
// read-only server or a role that may not make them leaves the slow path:
// logged once per watch at debug level, never fatal to the watch.
func (w *catalogWatch) makeBlocks(conn *pgx.Conn) {
	w.runs.begin()
	defer w.runs.end()
	ctx, cancel := context.WithTimeout(w.s.ctx, epochQueryTimeout)
	defer cancel()
	var made int
	var node *int
	if n := w.s.cfg.Node; n >= 1 && n <= generator.MaxNode {
		node = &n
	}
	err := conn.QueryRow(ctx, makeBlocksSQL, node).Scan(&made)
	switch {
	case err != nil && !w.blocksLogged:
		w.blocksLogged = true
		w.s.log.Debug("per-row blocks not made", "database", w.db, "err", err)
	case err == nil && made > 0:
		w.s.log.Debug("per-row blocks made", "database", w.db, "sequences", made)
	}
}

// waitEvent is what ended a wait.
type waitEvent uint8

const (
	waitTimeout  waitEvent = iota // d passed
	waitNotified                  // a notification (it moved the epochs while armed)
	waitNudged                    // a session asked an unarmed watch to look again
)

// wait receives a notification for up to d, moving the epochs while armed,
// and returns after it. With wakeOnNudge it also returns early when a
// session nudges the watch. A timeout is not an error; a broken connection
// is.
func (w *catalogWatch) wait(conn *pgx.Conn, d time.Duration, wakeOnNudge bool) (waitEvent, error) {
	ctx, cancel := context.WithTimeout(w.s.ctx, d)
	defer cancel()
	var nudged atomic.Bool
	if wakeOnNudge {
		stop := make(chan struct{})
		defer close(stop)
		go func() {
			select {
			case <-w.nudge:
				nudged.Store(true)
				cancel()
			case <-stop:
			}
		}()
	}
	for {
		// pgx buffers notifications that arrive during other queries (the
		// trigger check): they are returned here first, none is lost.
		_, err := conn.WaitForNotification(ctx)
		if err == nil {
			if err := w.coalesce(conn); err != nil {
				return 0, err
			}
			if w.cur.Load() != 0 {
				// The privileges are read first: sessions build their
				// caches after this move, and an unannounced change made
				// after an earlier reading and undone before the next
				// would go unseen (an announced ALTER SEQUENCE ... OWNER,
				// then REASSIGN OWNED back). One query per move: each
				// move costs every session a query already.
				if _, err := w.privilegesChanged(conn); err != nil {
					return 0, err
				}
				w.movePrivs()
				w.cur.Store(w.s.catalogEpochs.Add(1))
			}
			w.lastMove = time.Now()
			// Back to the caller, which makes the blocks of a default the
			// DDL may have added (makeBlocks); later notifications wait
			// in pgx's buffer.
			return waitNotified, nil
		}
		if w.s.ctx.Err() != nil {
			return 0, w.s.ctx.Err()
		}
		if ctx.Err() != nil && (pgconn.Timeout(err) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)) {
			if conn.IsClosed() {
				return 0, fmt.Errorf("compat: catalog watch on %q: connection closed", w.db)
			}
			if nudged.Load() {
				return waitNudged, nil
			}
			return waitTimeout, nil
		}
		return 0, fmt.Errorf("compat: catalog watch on %q: %w", w.db, err)
	}
}

// coalesce waits until epochMinGap has passed since the last move of the
// epoch, then takes the notifications that have arrived, for at most
// another epochMinGap (a flood that never pauses must not hold the move
// back), so that they move it once. It returns the service's error when it
// stops.
func (w *catalogWatch) coalesce(conn *pgx.Conn) error {
	if gap := epochMinGap - time.Since(w.lastMove); gap > 0 {
		select {
		case <-w.s.ctx.Done():
			return w.s.ctx.Err()
		case <-time.After(gap):
		}
	}
	for end := time.Now().Add(epochMinGap); time.Now().Before(end); {
		ctx, cancel := context.WithTimeout(w.s.ctx, epochDrainWait)
		_, err := conn.WaitForNotification(ctx)
		cancel()
		if err != nil {
			if w.s.ctx.Err() != nil {
				return w.s.ctx.Err()
			}
			// A timeout leaves the connection usable; anything else
			// shows at the next wait or query.
			return nil
		}
	}
	return nil
}

// isReadOnlyServer reports whether err is the server refusing LISTEN because
// it is read-only: a hot standby says 25006 (read_only_sql_transaction).
// The watch keeps retrying: a promoted standby takes LISTEN.
func isReadOnlyServer(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "25006"
}
