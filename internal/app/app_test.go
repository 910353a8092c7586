package app

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/snowflake-proxy/snowflake-proxy/internal/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

func start(t *testing.T) *App { return startConfig(t, Config{}) }

// startConfig starts an App in front of the shared server with cfg's
// limits.
func startConfig(t *testing.T, cfg Config) *App {
	t.Helper()
	srv := pgtest.Shared(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cfg.Listen, cfg.Upstream, cfg.Node = "127.0.0.1:0", srv.URL("postgres"), 1
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	a, err := Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func closeApp(t *testing.T, a *App) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := a.Close(ctx); err != nil {
		t.Fatal(err)
	}
}

// Regression: Serve ran in a goroutine whose error nobody read until
// Close, so a proxy that no longer accepted clients kept running. Done
// now tells the command, and Err says why.
func TestDoneWhenAcceptingFails(t *testing.T) {
	a := start(t)
	select {
	case <-a.Done():
		t.Fatal("Done before anything failed")
	default:
	}
	if a.Err() != nil {
		t.Fatalf("Err before Done: %v", a.Err())
	}
	_ = a.ln.Close() // as if the listening socket broke under the server
	select {
	case <-a.Done():
	case <-time.After(30 * time.Second):
		t.Fatal("Done not closed after the listener failed")
	}
	if err := a.Err(); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Err = %v, want the accept error", err)
	}
	closeApp(t, a)
}

// After Close, Done is closed and Err is nil: the stop was asked for.
func TestDoneAfterClose(t *testing.T) {
	a := start(t)
	closeApp(t, a)
	select {
	case <-a.Done():
	default:
		t.Fatal("Done not closed after Close")
	}
	if err := a.Err(); err != nil {
		t.Fatalf("Err after Close: %v", err)
	}
}

// MaxClients and IdleClientTimeout reach the wire server: a second client
// is refused with 53300, and the first, idle, is ended with 57P05.
func TestSessionLimitsReachWire(t *testing.T) {
	a := startConfig(t, Config{MaxClients: 1, IdleClientTimeout: 200 * time.Millisecond})
	defer closeApp(t, a)
	srv := pgtest.Shared(t)
	host, port, _ := net.SplitHostPort(a.Addr())
	url := "postgres://" + srv.Superuser() + "@" + host + ":" + port + "/postgres?sslmode=disable"
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := pgconn.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	var pe *pgconn.PgError
	if _, err := pgconn.Connect(ctx, url); !errors.As(err, &pe) || pe.Code != "53300" {
		t.Fatalf("second client: %v, want 53300", err)
	}
	if _, err := c.ReceiveMessage(ctx); !errors.As(err, &pe) || pe.Code != "57P05" {
		t.Fatalf("idle client: %v, want 57P05", err)
	}
}
