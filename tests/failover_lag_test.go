//go:build failoverlag

package tests

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/snowflake-proxy/snowflake-proxy/internal/app"
)

// The documented limit of an asynchronous standby (docs/operations.md, "Topologies":
// fail over only to a synchronous one), shown by a test that fails: it is
// kept out of the default run (go test -tags failoverlag -run
// TestFailoverLaggingStandby ./tests/). A proxy that keeps running through
// the failover raises the promoted server above what it issued
// (compat: TestLeaseAfterTheServerLostItsRecord); this one is restarted.
//
// A lease is durable on the primary before the proxy hands out its IDs,
// and the shim's setval of the sequence is written to the WAL at once, but
// an asynchronous standby receives that WAL later. When the primary dies
// first, the promoted standby holds older lease tops and sequence values.
// IDs are mostly the clock, so new IDs land above the lost ones, except
// where IDs had run ahead of the clock: a sequence with INCREMENT 4096
// (one millisecond per ID), more than 4096 IDs in a millisecond, a setval
// into the future. IDs issued after the failover then repeat IDs issued
// before it. No row can hold a lost ID on the promoted server (its WAL
// comes after the lease's), but the IDs had left the database: returned
// to clients, sent elsewhere, or replicated to another node of a
// multi-master cluster by logical replication.

// TestFailoverLaggingStandbyNeverRepeatsIDs: the standby stops receiving
// WAL (as a lagging standby), the proxy issues IDs that run a minute
// ahead of the clock, the primary dies, the standby is promoted and the
// proxy restarted on it: no ID issued after may repeat one issued before.
func TestFailoverLaggingStandbyNeverRepeatsIDs(t *testing.T) {
	p := startStandbyPair(t)
	a := startProxyConfig(t, app.Config{Upstream: p.primary.URL("postgres"), Node: standbyProxyNode})
	c := connectURL(t, proxyURLFor(a, p.db))
	for _, sql := range []string{"CREATE EXTENSION snowflake", "CREATE SEQUENCE s INCREMENT 4096"} {
		mustRun(t, c, sql)
	}
	before := mustInt64s(t, c, "SELECT snowflake.nextval('s') FROM generate_series(1, 5)")
	for range 5 {
		before = append(before, mustInt64(t, c, "SELECT snowflake.nextval('s')"))
	}
	p.waitReplayed(t)

	// The standby stops receiving WAL.
	sc := connectURL(t, p.standby.URL("postgres"))
	mustRun(t, sc, "ALTER SYSTEM SET primary_conninfo = ''")
	mustRun(t, sc, "SELECT pg_reload_conf()")
	deadline := time.Now().Add(failoverWait)
	for mustInt64(t, sc, "SELECT count(*) FROM pg_stat_wal_receiver") != 0 {
		if time.Now().After(deadline) {
			t.Fatal("the standby's WAL receiver is still running")
		}
		time.Sleep(20 * time.Millisecond)
	}
	_ = sc.Close(context.Background())

	// IDs a minute ahead of the clock: the shim's per-row calls, then the
	// fast path above them.
	before = append(before, mustInt64s(t, c, "SELECT snowflake.nextval('s') FROM generate_series(1, 60000)")...)
	for range 20 {
		before = append(before, mustInt64(t, c, "SELECT snowflake.nextval('s')"))
	}
	top := decodeID(slices.Max(before)).Time()
	t.Logf("%d IDs before the failover, the last %s ahead of the clock", len(before), time.Until(top).Round(time.Millisecond))

	crash(t, p.primary)
	closeCtx, closeCancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer closeCancel()
	_ = a.Close(closeCtx)
	promote(t, p)
	b := startProxyConfig(t, app.Config{Upstream: p.standby.URL("postgres"), Node: standbyProxyNode})
	c2 := connectURL(t, proxyURLFor(b, p.db))
	var after []int64
	for range 20 {
		after = append(after, mustInt64(t, c2, "SELECT snowflake.nextval('s')"))
	}
	after = append(after, mustInt64s(t, c2, "SELECT snowflake.nextval('s') FROM generate_series(1, 100)")...)
	if !time.Now().Before(top) {
		t.Fatalf("premise: the failover took until %s, past the last ID issued before (%s)", time.Now().UTC(), top.UTC())
	}

	issued := map[int64]bool{}
	for _, id := range before {
		issued[id] = true
	}
	var repeated []string
	for _, id := range after {
		if issued[id] {
			repeated = append(repeated, fmt.Sprintf("%d %v", id, decodeID(id)))
		}
	}
	if len(repeated) > 0 {
		t.Errorf("%d of %d IDs issued after the failover repeat IDs issued before it, e.g. %v", len(repeated), len(after), repeated[:min(3, len(repeated))])
	}
	checkUniqueNode(t, "IDs after the failover", after, standbyProxyNode)
}
