package pgserver_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/snowflake-proxy/snowflake-proxy/internal/pgserver"
)

// TestStartQueryStop starts a real server (as the postgres user when the
// test runs as root), runs a query over TCP, and stops it.
func TestStartQueryStop(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	srv, err := pgserver.Start(ctx, pgserver.Options{Settings: map[string]string{"fsync": "off"}})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop(ctx)
	c, err := pgx.Connect(ctx, srv.URL("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	var v int
	if err := c.QueryRow(ctx, "SELECT 41 + 1").Scan(&v); err != nil || v != 42 {
		t.Fatalf("got %d, %v", v, err)
	}
	c.Close(ctx)
	if err := srv.Stop(ctx); err != nil {
		t.Fatal(err)
	}
}
