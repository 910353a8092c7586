package compat

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sort"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

var quietLog = slog.New(slog.NewTextHandler(io.Discard, nil))

// claimNode claims a node in the database of url, released at the end of
// the test.
func claimNode(t *testing.T, cfg AutoNodeConfig) (*AutoNode, error) {
	t.Helper()
	cfg.Logger = quietLog
	a, err := ClaimNode(ctxT(t), cfg)
	if err == nil {
		t.Cleanup(func() { _ = a.Close(context.Background()) })
	}
	return a, err
}

// Three proxies claiming at once in a database without the table get
// three distinct nodes of the range, the lowest first; a fourth finds none
// free.
func TestClaimNodeDistinctAtOnce(t *testing.T) {
	url := newDB(t)
	type result struct {
		a   *AutoNode
		err error
	}
	results := make(chan result, 3)
	for range 3 {
		go func() {
			a, err := ClaimNode(ctxT(t), AutoNodeConfig{ControlURL: url, Min: 5, Max: 7, Logger: quietLog})
			results <- result{a, err}
		}()
	}
	var nodes []int
	for range 3 {
		r := <-results
		if r.err != nil {
			t.Fatal(r.err)
		}
		t.Cleanup(func() { _ = r.a.Close(context.Background()) })
		nodes = append(nodes, r.a.Node())
	}
	sort.Ints(nodes)
	if nodes[0] != 5 || nodes[1] != 6 || nodes[2] != 7 {
		t.Fatalf("nodes %v, want 5, 6, 7", nodes)
	}
	if _, err := claimNode(t, AutoNodeConfig{ControlURL: url, Min: 5, Max: 7}); !errors.Is(err, ErrNoFreeNode) {
		t.Fatalf("a fourth claim in 5-7: %v, want ErrNoFreeNode", err)
	}
}

// A crashed proxy's node (no heartbeat, no release) is not reused before
// its last heartbeat + hold on the server's clock, and is reused after.
func TestClaimNodeReusedOnlyAfterHold(t *testing.T) {
	url := newDB(t)
	cfg := AutoNodeConfig{ControlURL: url, Min: 1, Max: 1, Heartbeat: 50 * time.Millisecond,
		StaleAfter: time.Second, LeaseDuration: 200 * time.Millisecond, Margin: 200 * time.Millisecond}
	a, err := claimNode(t, cfg)
	if err != nil {
		t.Fatal(err)
	}
	// A crash: the heartbeat stops and nothing is released.
	a.cancel()
	<-a.done
	a.pool.Close()
	a.closeOnce.Do(func() {})

	c := connect(t, url)
	var freeAt time.Time
	if err := c.QueryRow(ctxT(t), `SELECT heartbeat + hold FROM snowflake_proxy.node_claims WHERE node = 1`).Scan(&freeAt); err != nil {
		t.Fatal(err)
	}
	for attempts := 1; ; attempts++ {
		b, err := claimNode(t, cfg)
		var now time.Time
		if qerr := c.QueryRow(ctxT(t), `SELECT clock_timestamp()`).Scan(&now); qerr != nil {
			t.Fatal(qerr)
		}
		if err == nil {
			var beat time.Time
			if err := c.QueryRow(ctxT(t), `SELECT heartbeat FROM snowflake_proxy.node_claims WHERE node = 1`).Scan(&beat); err != nil {
				t.Fatal(err)
			}
			if beat.Before(freeAt) || b.Node() != 1 {
				t.Fatalf("node %d claimed at %v, before the crashed claim's end %v", b.Node(), beat, freeAt)
			}
			t.Logf("node 1 reused after %d attempts", attempts)
			return
		}
		if !errors.Is(err, ErrNoFreeNode) {
			t.Fatal(err)
		}
		if now.After(freeAt.Add(10 * time.Second)) {
			t.Fatalf("node 1 still not free at %v, 10 s after %v", now, freeAt)
		}
		time.Sleep(20 * time.Millisecond) // polling a condition with a deadline
	}
}

// Heartbeats renew the claim; while they cannot (the table is locked)
// Check fails once StaleAfter has passed, and succeeds again when they
// can. A claim whose row another proxy took is lost for good.
func TestClaimNodeStaleAndLost(t *testing.T) {
	url := newDB(t)
	a, err := claimNode(t, AutoNodeConfig{ControlURL: url, Heartbeat: 20 * time.Millisecond, StaleAfter: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if a.Node() != 1 {
		t.Fatalf("node %d, want 1", a.Node())
	}
	waitFor(t, "the claim to be current", func() bool { return a.Check() == nil })
	c := connect(t, url)
	tx, err := c.Begin(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctxT(t), `LOCK TABLE snowflake_proxy.node_claims IN ACCESS EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the claim to go stale", func() bool { return errors.Is(a.Check(), ErrNodeClaimStale) })
	if err := tx.Commit(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the claim to be renewed", func() bool { return a.Check() == nil })

	mustExec(t, c, `UPDATE snowflake_proxy.node_claims SET owner = 'another proxy' WHERE node = 1`)
	waitFor(t, "the claim to be lost", func() bool { return errors.Is(a.Check(), ErrNodeClaimLost) })
}

// Close leaves the node reserved for the lease and the margin only.
func TestClaimNodeCloseShortensTheHold(t *testing.T) {
	url := newDB(t)
	a, err := ClaimNode(ctxT(t), AutoNodeConfig{ControlURL: url, LeaseDuration: 2 * time.Second, Margin: 3 * time.Second, Logger: quietLog})
	if err != nil {
		t.Fatal(err)
	}
	c := connect(t, url)
	hold := func() float64 {
		t.Helper()
		var s float64
		if err := c.QueryRow(ctxT(t), `SELECT extract(epoch FROM hold) FROM snowflake_proxy.node_claims WHERE node = $1`, a.Node()).Scan(&s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	if h := hold(); h != (DefaultNodeStaleAfter + 5*time.Second).Seconds() {
		t.Fatalf("hold while running %vs, want StaleAfter + lease + margin", h)
	}
	if err := a.Close(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	if h := hold(); h != 5 {
		t.Fatalf("hold after Close %vs, want 5 (lease + margin)", h)
	}
	var priv bool
	if err := c.QueryRow(ctxT(t), `SELECT has_table_privilege('public', 'snowflake_proxy.node_claims', 'SELECT')`, pgx.QueryExecModeSimpleProtocol).Scan(&priv); err != nil {
		t.Fatal(err)
	}
	if priv {
		t.Fatal("PUBLIC may read snowflake_proxy.node_claims")
	}
}
