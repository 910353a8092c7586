package tests

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/snowflake-proxy/snowflake-proxy/internal/app"
)

// A primary fails over to its promoted standby while the proxy runs.
// --upstream takes one server: an operator gives the address that moves to
// the new primary (a virtual IP, a DNS name, HAProxy or PgBouncer in front
// of the servers), or restarts the proxy with the new primary's address.

// failoverWait bounds each wait for the proxy to notice a change.
const failoverWait = 30 * time.Second

// TestFailoverProxyFollowsPromotedStandby: the proxy's --upstream is an
// address that moves to the promoted standby. While the primary is down,
// open sessions end with an error and new ones are refused, without a
// hang, and /readyz says why; once the address reaches the promoted
// standby, new sessions through the same running proxy issue IDs again
// on every path, and so does a proxy restarted with the new primary as
// --upstream. No ID issued after the failover repeats one issued before,
// and all carry the proxy's node.
func TestFailoverProxyFollowsPromotedStandby(t *testing.T) {
	t.Parallel()
	p := startStandbyPair(t)
	fwd := startForwarder(t, p.primary.Addr())
	a := startProxyConfig(t, app.Config{
		Upstream:    "postgres://postgres@" + fwd.Addr() + "/postgres?sslmode=disable",
		Node:        standbyProxyNode,
		AdminListen: "127.0.0.1:0",
	})
	setup := connectURL(t, proxyURLFor(a, p.db))
	for _, sql := range []string{
		"CREATE EXTENSION snowflake",
		"CREATE TABLE items (id bigint PRIMARY KEY DEFAULT snowflake.nextval(), item text)",
		"CREATE SEQUENCE s",
		"CREATE TABLE warm (id bigint PRIMARY KEY DEFAULT snowflake.nextval())",
	} {
		mustRun(t, setup, sql)
	}
	_ = setup.Close(context.Background())

	conn := connectURL(t, proxyURLFor(a, p.db))
	before := failoverIDs(t, conn)
	waitReadyz(t, a, 200, failoverWait)
	// The standby has everything: a clean failover (a lagging standby is
	// another matter, see failover_lag_test.go).
	p.waitReplayed(t)

	crash(t, p.primary)
	ctx, cancel := context.WithTimeout(context.Background(), failoverWait)
	defer cancel()
	if _, err := run(ctx, conn, "SELECT 1"); err == nil || ctx.Err() != nil {
		t.Fatalf("a session open when its server died: SELECT 1 = %s, want an error before the deadline", describeErr(err))
	} else {
		t.Logf("open session after the crash: %s", describeErr(err))
	}
	_, err := pgx.Connect(ctx, proxyURLFor(a, p.db))
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || !strings.HasPrefix(pgErr.Code, "08") || ctx.Err() != nil {
		t.Fatalf("a new session while the primary is down: %s; want a connection error (class 08) before the deadline", describeErr(err))
	}
	t.Logf("new session while the primary is down: %s", describeErr(err))
	t.Logf("/readyz while the primary is down: %s", waitReadyz(t, a, 503, failoverWait))

	promote(t, p)
	fwd.move(p.standby.Addr())
	t.Logf("/readyz after the promotion: %s", waitReadyz(t, a, 200, failoverWait))
	fresh := connectURL(t, proxyURLFor(a, p.db))
	// The proxy's own connections followed: the catalog watch listens
	// again (INSERT defaults are the proxy's, not the shim's), and the
	// node claim is held on the promoted server.
	waitFastDefaults(t, fresh, "warm")
	waitMetric(t, a, `snowflake_proxy_node_claim{database="`+p.db+`",state="held"}`, 1, failoverWait)
	after := failoverIDs(t, fresh)

	// The operator's other way: the proxy restarted with the new primary
	// as --upstream.
	closeCtx, closeCancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer closeCancel()
	if err := a.Close(closeCtx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("closing the proxy: %v", err)
	}
	b := startProxyConfig(t, app.Config{Upstream: p.standby.URL("postgres"), Node: standbyProxyNode})
	restarted := failoverIDs(t, connectURL(t, proxyURLFor(b, p.db)))

	for _, seq := range []string{"s", "items"} {
		all := append(append(append([]int64{}, before[seq]...), after[seq]...), restarted[seq]...)
		checkUniqueNode(t, "sequence "+seq+" before and after the failover", all, standbyProxyNode)
	}
	got := mustInt64(t, connectURL(t, p.standby.URL(p.db)), "SELECT count(DISTINCT id) FROM items")
	if want := int64(len(before["items"]) + len(after["items"]) + len(restarted["items"])); got != want {
		t.Errorf("the promoted server holds %d distinct items, want %d", got, want)
	}
}

// promote promotes p's standby (pg_ctl promote) and waits until it leaves
// recovery.
func promote(t *testing.T, p *standbyPair) {
	t.Helper()
	(&standbySetup{standbyPair: p}).promote(t)
}
