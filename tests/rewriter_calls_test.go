package tests

import (
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/snowflake-proxy/snowflake-proxy/rewrite/plan"
	"github.com/snowflake-proxy/snowflake-proxy/wire"
)

// countingRewriter counts the plans asked for each text.
type countingRewriter struct {
	wire.Rewriter
	mu sync.Mutex
	n  map[string]int
}

func (r *countingRewriter) Plan(sql string) *plan.Plan {
	r.mu.Lock()
	r.n[strings.Clone(sql)]++ // sql aliases the session's read buffer
	r.mu.Unlock()
	return r.Rewriter.Plan(sql)
}

// calls returns how many plans were asked for texts starting with prefix.
func (r *countingRewriter) calls(prefix string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for sql, k := range r.n {
		if strings.HasPrefix(sql, prefix) {
			n += k
		}
	}
	return n
}

// Regression: a cold INSERT (its target's defaults not yet known to the
// session) met on an event loop's thread needs a hidden query, so the loop
// hands the session to its goroutines; the pump then took the message from
// its start and asked the Rewriter for its plan again, a second analysis of
// every such Parse or Query. The plan made on the loop's thread now goes
// with the handover: each message is analysed once.
func TestColdInsertIsPlannedOnce(t *testing.T) {
	var rw *countingRewriter
	p := newStatsProxyWith(t, insertNode, func(c *wire.Config) {
		rw = &countingRewriter{Rewriter: c.Rewriter, n: map[string]int{}}
		c.Rewriter = rw
	})
	setup := p.connect(t, pgx.QueryExecModeSimpleProtocol)
	mustRun(t, setup, "CREATE EXTENSION snowflake")
	const tables = 4
	for i := 0; i < tables; i++ {
		mustRun(t, setup, fmt.Sprintf("CREATE TABLE t%d (id bigint PRIMARY KEY DEFAULT snowflake.nextval(), note text)", i))
	}
	waitFastDefaults(t, setup, "t0")
	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeCacheStatement, pgx.QueryExecModeExec, pgx.QueryExecModeSimpleProtocol} {
		t.Run(mode.String(), func(t *testing.T) {
			conn := p.connect(t, mode)
			before := p.ws.Stats().Handovers
			for i := 0; i < tables; i++ {
				prefix := fmt.Sprintf("INSERT INTO t%d (note) VALUES (", i)
				was := rw.calls(prefix)
				if tag := mustRun(t, conn, prefix+"$1)", mode.String()); tag.String() != "INSERT 0 1" {
					t.Fatalf("%s: tag %q", prefix, tag)
				}
				if n := rw.calls(prefix) - was; n != 1 {
					t.Errorf("%s...: %d plans, want 1", prefix, n)
				}
			}
			// The test is about the loop's handovers: without one it
			// proves nothing.
			if p.ws.Stats().Handovers == before {
				t.Fatal("no handover: the INSERTs never met the event loop")
			}
		})
	}
}
