package pgtest

import (
	"context"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/snowflake-proxy/snowflake-proxy/internal/pgserver"
)

var (
	once    sync.Once
	shared  *pgserver.Server
	initErr error
	dbSeq   atomic.Int64
)

// Settings used for every test server: fast and durable enough for tests.
var testSettings = map[string]string{
	"fsync":              "off",
	"synchronous_commit": "off",
	"full_page_writes":   "off",
	// PREPARE TRANSACTION, which the shim must survive.
	"max_prepared_transactions": "8",
}

// Main runs the tests and stops the shared server afterwards.
func Main(m *testing.M) {
	code := m.Run()
	if shared != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		_ = shared.Stop(ctx)
		cancel()
	}
	os.Exit(code)
}

// Shared returns the test binary's server (from DefaultBinDir), starting it
// on first use. It fails the test when no server binaries exist.
func Shared(tb testing.TB) *pgserver.Server {
	tb.Helper()
	once.Do(func() {
		var bin string
		if bin, initErr = DefaultBinDir(); initErr == nil {
			shared, initErr = pgserver.Start(context.Background(), pgserver.Options{BinDir: bin, Settings: testSettings})
		}
	})
	if initErr != nil {
		tb.Fatalf("pgtest: cannot start PostgreSQL: %v", initErr)
	}
	return shared
}

// Start starts a dedicated server for one test (custom HBA or settings),
// stopped at the end of the test. An empty o.BinDir is DefaultBinDir.
func Start(tb testing.TB, o pgserver.Options) *pgserver.Server {
	tb.Helper()
	if o.BinDir == "" {
		d, err := DefaultBinDir()
		if err != nil {
			tb.Fatalf("pgtest: %v", err)
		}
		o.BinDir = d
	}
	if o.Settings == nil {
		o.Settings = map[string]string{}
	}
	for k, v := range testSettings {
		if _, ok := o.Settings[k]; !ok {
			o.Settings[k] = v
		}
	}
	srv, err := pgserver.Start(context.Background(), o)
	if err != nil {
		tb.Fatalf("pgtest: cannot start PostgreSQL: %v", err)
	}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		_ = srv.Stop(ctx)
	})
	return srv
}

// NewDatabase creates a fresh database on srv for one test and returns its
// name; it is dropped at the end of the test.
func NewDatabase(tb testing.TB, srv *pgserver.Server) string {
	tb.Helper()
	name := fmt.Sprintf("t%d_%d", os.Getpid(), dbSeq.Add(1))
	Exec(tb, srv, "postgres", "CREATE DATABASE "+name)
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if c, err := pgx.Connect(ctx, srv.URL("postgres")); err == nil {
			_, _ = c.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
			_ = c.Close(ctx)
		}
	})
	return name
}

// Exec runs statements directly on the server (not through the proxy).
func Exec(tb testing.TB, srv *pgserver.Server, db, sql string) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, err := pgx.Connect(ctx, srv.URL(db))
	if err != nil {
		tb.Fatalf("pgtest: connect: %v", err)
	}
	defer c.Close(ctx)
	if _, err := c.Exec(ctx, sql); err != nil {
		tb.Fatalf("pgtest: %s: %v", sql, err)
	}
}
