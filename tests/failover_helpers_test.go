package tests

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/snowflake-proxy/snowflake-proxy/internal/app"
	"github.com/snowflake-proxy/snowflake-proxy/internal/pgserver"
)

// forwarder relays TCP connections to a target that the test moves, as
// the virtual IP, DNS name or HAProxy an operator points --upstream at
// moves to the promoted server. Moving it cuts the connections to the old
// target (HAProxy's on-marked-down shutdown-sessions).
type forwarder struct {
	ln     net.Listener
	mu     sync.Mutex
	target string
	conns  map[net.Conn]struct{}
	wg     sync.WaitGroup
}

func startForwarder(t *testing.T, target string) *forwarder {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &forwarder{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	f.wg.Add(1)
	go f.serve()
	t.Cleanup(func() {
		_ = ln.Close()
		f.cut()
		f.wg.Wait()
	})
	return f
}

func (f *forwarder) Addr() string { return f.ln.Addr().String() }

// move sends new connections to target and cuts the open ones.
func (f *forwarder) move(target string) {
	f.mu.Lock()
	f.target = target
	f.mu.Unlock()
	f.cut()
}

func (f *forwarder) cut() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for c := range f.conns {
		_ = c.Close()
	}
}

func (f *forwarder) serve() {
	defer f.wg.Done()
	for {
		c, err := f.ln.Accept()
		if err != nil {
			return
		}
		f.wg.Add(1)
		go f.relay(c)
	}
}

// relay connects c to the current target; a target that does not answer
// closes c, as a dead server's address does.
func (f *forwarder) relay(c net.Conn) {
	defer f.wg.Done()
	f.mu.Lock()
	target := f.target
	f.mu.Unlock()
	s, err := net.DialTimeout("tcp", target, 5*time.Second)
	if err != nil {
		_ = c.Close()
		return
	}
	f.mu.Lock()
	f.conns[c], f.conns[s] = struct{}{}, struct{}{}
	f.mu.Unlock()
	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		_ = dst.Close()
		_ = src.Close()
		done <- struct{}{}
	}
	go pipe(s, c)
	go pipe(c, s)
	<-done
	<-done
	f.mu.Lock()
	delete(f.conns, c)
	delete(f.conns, s)
	f.mu.Unlock()
}

// crash stops srv at once (pg_ctl stop -m immediate): no shutdown
// checkpoint, as when the machine dies.
func crash(t *testing.T, srv *pgserver.Server) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if out, err := srv.Command(ctx, "pg_ctl", "-D", srv.DataDir(), "-m", "immediate", "-w", "stop").CombinedOutput(); err != nil {
		t.Fatalf("pg_ctl stop -m immediate: %v: %s", err, out)
	}
}

// failoverIDs issues IDs through conn on every path: fast-path
// nextval('s'), the shim's per-row calls, INSERT defaults of items. It
// returns them by sequence.
func failoverIDs(t *testing.T, conn *pgx.Conn) map[string][]int64 {
	t.Helper()
	ids := map[string][]int64{}
	for range 5 {
		ids["s"] = append(ids["s"], mustInt64(t, conn, "SELECT snowflake.nextval('s')"))
	}
	ids["s"] = append(ids["s"], mustInt64s(t, conn, "SELECT snowflake.nextval('s') FROM generate_series(1, 50)")...)
	for range 5 {
		ids["items"] = append(ids["items"], mustInt64(t, conn, "INSERT INTO items (item) VALUES ('x') RETURNING id"))
	}
	ids["items"] = append(ids["items"], mustInt64s(t, conn, "INSERT INTO items (item) SELECT 'y' FROM generate_series(1, 20) RETURNING id")...)
	return ids
}

// readyz returns the proxy's /readyz status and body.
func readyz(t *testing.T, a *app.App) (int, string) {
	t.Helper()
	client := &http.Client{Timeout: 10 * time.Second}
	resp, err := client.Get("http://" + a.AdminAddr() + "/readyz")
	if err != nil {
		t.Fatalf("GET /readyz: %v", err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET /readyz: %v", err)
	}
	return resp.StatusCode, strings.TrimSpace(string(b))
}

// waitReadyz polls /readyz until its status is want, and fails with the
// last answer after the deadline.
func waitReadyz(t *testing.T, a *app.App, want int, within time.Duration) string {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		code, body := readyz(t, a)
		if code == want {
			return body
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz still %d %q after %s, want %d", code, body, within, want)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// proxyURLFor is a URL through a to db as postgres.
func proxyURLFor(a *app.App, db string) string {
	return fmt.Sprintf("postgres://postgres@%s/%s?sslmode=disable", a.Addr(), db)
}

// waitMetric polls the proxy's metric name until it is want, and fails
// after the deadline.
func waitMetric(t *testing.T, a *app.App, name string, want int64, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		got := metric(t, a, name)
		if got == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s = %d after %s, want %d", name, got, within, want)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
