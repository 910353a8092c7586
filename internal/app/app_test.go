package app

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/snowflake-proxy/snowflake-proxy/internal/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

func start(t *testing.T) *App {
	t.Helper()
	srv := pgtest.Shared(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	a, err := Start(ctx, Config{Listen: "127.0.0.1:0", Upstream: srv.URL("postgres"), Node: 1,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
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
