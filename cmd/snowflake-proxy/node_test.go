package main

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/snowflake-proxy/snowflake-proxy/internal/pgserver"
	"github.com/snowflake-proxy/snowflake-proxy/internal/pgtest"
)

func TestNodeFromHostname(t *testing.T) {
	for _, c := range []struct {
		host         string
		base, lo, hi int
		want         int
		wantErr      string
	}{
		{"proxy-0", 1, 1, 1023, 1, ""},
		{"proxy-3", 1, 1, 1023, 4, ""},
		{"snowflake-proxy-12", 100, 1, 1023, 112, ""},
		{"proxy-3.proxy-pods.default.svc.cluster.local", 1, 1, 1023, 4, ""},
		{"proxy-07", 10, 1, 1023, 17, ""},
		{"proxy-2", 512, 512, 1023, 514, ""},
		{"proxy", 1, 1, 1023, 0, `host name "proxy" has no ordinal`},
		{"proxy-", 1, 1, 1023, 0, "has no ordinal"},
		{"proxy-a1", 1, 1, 1023, 0, "has no ordinal"},
		{"42", 1, 1, 1023, 0, "has no ordinal"},
		{"", 1, 1, 1023, 0, "has no ordinal"},
		{"proxy-1.example-2", 1, 1, 1023, 2, ""},
		{"proxy-99999999999999999999", 1, 1, 1023, 0, "too large"},
		{"proxy-600", 512, 512, 1023, 0, `gives node 1112 (512 + 600), outside 512-1023`},
		{"proxy-511", 1, 1, 511, 0, "gives node 512 (1 + 511), outside 1-511"},
	} {
		t.Run(c.host, func(t *testing.T) {
			got, err := nodeFromHostname(c.host, c.base, c.lo, c.hi)
			if c.wantErr == "" && (err != nil || got != c.want) {
				t.Fatalf("node %d, err %v; want %d", got, err, c.want)
			}
			if c.wantErr != "" && (err == nil || !strings.Contains(err.Error(), c.wantErr)) {
				t.Fatalf("node %d, err %v; want an error with %q", got, err, c.wantErr)
			}
		})
	}
}

// The node settings are checked together, from flags, environment and the
// config file: --node-range bounds every way of giving a node.
func TestNodeSettings(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		name     string
		env      map[string]string
		file     string
		args     []string
		host     string
		node     int
		auto     bool
		min, max int
		wantErr  string
	}{
		{name: "none", min: 1, max: 1023},
		{name: "node", args: []string{"--node", "7"}, node: 7, min: 1, max: 1023},
		{name: "auto", args: []string{"--node", "auto"}, auto: true, min: 1, max: 1023},
		{name: "auto in a range", args: []string{"--node", "auto", "--node-range", "512-1023"}, auto: true, min: 512, max: 1023},
		{name: "auto from env", env: map[string]string{"SNOWFLAKE_PROXY_NODE": "auto", "SNOWFLAKE_PROXY_NODE_RANGE": "1-511"}, auto: true, min: 1, max: 511},
		{name: "auto from file", file: "node = \"auto\"\nnode-range = \"3-4\"", auto: true, min: 3, max: 4},
		{name: "command line number over file auto", file: `node = "auto"`, args: []string{"--node", "9"}, node: 9, min: 1, max: 1023},
		{name: "single node range", args: []string{"--node", "5", "--node-range", "5"}, node: 5, min: 5, max: 5},
		{name: "node in range", args: []string{"--node", "600", "--node-range", "512-1023"}, node: 600, min: 512, max: 1023},
		{name: "node below range", args: []string{"--node", "7", "--node-range", "512-1023"}, wantErr: "invalid --node 7: outside --node-range 512-1023"},
		{name: "node above range", file: "node = 600\nnode-range = \"1-511\"", wantErr: "invalid --node 600: outside --node-range 1-511"},
		{name: "range reversed", args: []string{"--node-range", "511-1"}, wantErr: `invalid --node-range "511-1"`},
		{name: "range from 0", args: []string{"--node-range", "0-511"}, wantErr: `invalid --node-range "0-511"`},
		{name: "range past 1023", args: []string{"--node-range", "512-1024"}, wantErr: `invalid --node-range "512-1024"`},
		{name: "range not numbers", env: map[string]string{"SNOWFLAKE_PROXY_NODE_RANGE": "low-high"}, wantErr: `invalid --node-range "low-high"`},
		{name: "not auto", args: []string{"--node", "automatic"}, wantErr: "want a node number 1..1023, or auto"},
		{name: "hostname", args: []string{"--node-from-hostname"}, host: "proxy-3", node: 4, min: 1, max: 1023},
		{name: "hostname with base", args: []string{"--node-from-hostname", "--node-base", "100"}, host: "proxy-3", node: 103, min: 1, max: 1023},
		{name: "hostname from range start", args: []string{"--node-from-hostname", "--node-range", "512-1023"}, host: "proxy-0", node: 512, min: 512, max: 1023},
		{name: "hostname from file", file: "node-from-hostname = true\nnode-base = 20", host: "proxy-1", node: 21, min: 1, max: 1023},
		{name: "hostname outside range", args: []string{"--node-from-hostname", "--node-range", "1-2"}, host: "proxy-5", wantErr: "gives node 6 (1 + 5), outside 1-2"},
		{name: "hostname without ordinal", args: []string{"--node-from-hostname"}, host: "db-proxy", wantErr: `host name "db-proxy" has no ordinal`},
		{name: "hostname and node", args: []string{"--node-from-hostname", "--node", "3"}, host: "proxy-1", wantErr: "--node and --node-from-hostname both given"},
		{name: "hostname and auto", env: map[string]string{"SNOWFLAKE_PROXY_NODE": "auto"}, args: []string{"--node-from-hostname"}, host: "proxy-1",
			wantErr: "--node and --node-from-hostname both given"},
		{name: "base without hostname", args: []string{"--node", "3", "--node-base", "10"}, wantErr: "--node-base needs --node-from-hostname"},
	} {
		t.Run(c.name, func(t *testing.T) {
			args := c.args
			if c.file != "" {
				path := filepath.Join(dir, strings.ReplaceAll(c.name, " ", "_")+".toml")
				writeConfig(t, path, c.file)
				args = append([]string{"--config", path}, args...)
			}
			var errOut bytes.Buffer
			m := &Main{Stderr: &errOut, Getenv: func(k string) string { return c.env[k] },
				Hostname: func() (string, error) { return c.host, nil }}
			o, err := m.parseFlags(args)
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) {
					t.Fatalf("err %v, want one with %q", err, c.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if o.node != c.node || o.nodeAuto != c.auto || o.nodeMin != c.min || o.nodeMax != c.max {
				t.Fatalf("node %d auto %v range %d-%d; want %d %v %d-%d", o.node, o.nodeAuto, o.nodeMin, o.nodeMax, c.node, c.auto, c.min, c.max)
			}
		})
	}
}

// A proxy process of the fleet test.
type fleetProxy struct {
	proc  *proxyProcess
	addr  string
	admin string
	node  int
}

func startFleetProxy(t *testing.T, ctx context.Context, p *proxyProcess) *fleetProxy {
	t.Helper()
	line := p.ready(t, ctx)
	f := &fleetProxy{proc: p, addr: strings.Fields(strings.SplitN(line, "listening on ", 2)[1])[0], admin: adminAddr(t, p.errOut)}
	return f
}

// Three proxies started at once with --node auto on one server take three
// distinct nodes of --node-range, which they log, show in SHOW
// snowflake.node and export as snowflake_proxy_node. After kill -9 of one
// and a restart, no two live proxies share a node, and no ID of any of
// them repeats across it.
func TestNodeAutoFleet(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	srv := pgtest.Start(t, pgserver.Options{})
	db := pgtest.NewDatabase(t, srv)
	pgtest.Exec(t, srv, db, "CREATE TABLE t (id bigint PRIMARY KEY, v int)")
	args := []string{"--node", "auto", "--node-range", "5-9", "--upstream", srv.URL("postgres"), "--listen", "127.0.0.1:0",
		"--admin-listen", "127.0.0.1:0", "--log-level", "info"}

	var procs []*proxyProcess
	for range 3 {
		procs = append(procs, spawnProxyProcess(t, args...))
	}
	var fleet []*fleetProxy
	for _, p := range procs {
		fleet = append(fleet, startFleetProxy(t, ctx, p))
	}
	url := func(f *fleetProxy) string {
		return "postgres://" + srv.Superuser() + "@" + f.addr + "/" + db + "?sslmode=disable"
	}
	// The shim first, through one of them; the sequence and its default
	// after.
	setup, err := pgx.Connect(ctx, url(fleet[0]))
	if err != nil {
		t.Fatal(err)
	}
	for _, sql := range []string{"CREATE EXTENSION snowflake", "CREATE SEQUENCE s",
		"ALTER TABLE t ALTER COLUMN id SET DEFAULT snowflake.nextval('s')"} {
		if _, err := setup.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	setup.Close(ctx)

	checkNodes := func(fleet []*fleetProxy) {
		t.Helper()
		seen := map[int]bool{}
		for _, f := range fleet {
			c, err := pgx.Connect(ctx, url(f))
			if err != nil {
				t.Fatal(err)
			}
			var show string
			if err := c.QueryRow(ctx, "SHOW snowflake.node").Scan(&show); err != nil {
				t.Fatal(err)
			}
			c.Close(ctx)
			if _, err := fmt.Sscan(show, &f.node); err != nil || f.node < 5 || f.node > 9 {
				t.Fatalf("SHOW snowflake.node = %q: want a node of 5-9", show)
			}
			if seen[f.node] {
				t.Fatalf("two live proxies have node %d", f.node)
			}
			seen[f.node] = true
			if !strings.Contains(f.proc.errOut.String(), fmt.Sprintf(`msg="claimed node" component=app node=%d range=5-9`, f.node)) {
				t.Errorf("no claimed node line for node %d:\n%s", f.node, f.proc.errOut.String())
			}
			if v := pgtest.Scrape(t, f.admin).Value(t, "snowflake_proxy_node", "source", "auto"); v != float64(f.node) {
				t.Errorf("snowflake_proxy_node = %v, want %d", v, f.node)
			}
		}
	}
	checkNodes(fleet)
	if got := []int{fleet[0].node, fleet[1].node, fleet[2].node}; !sameSet(got, []int{5, 6, 7}) {
		t.Fatalf("nodes %v, want 5, 6, 7: the lowest free of the range", got)
	}

	var mu sync.Mutex
	var ids []int64
	load := func(fleet []*fleetProxy) {
		t.Helper()
		var wg sync.WaitGroup
		errs := make(chan error, len(fleet))
		for _, f := range fleet {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs <- issue(ctx, url(f), f.node, 100, func(id int64) {
					mu.Lock()
					ids = append(ids, id)
					mu.Unlock()
				})
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	load(fleet)

	// kill -9: no release; its node stays reserved past its last lease.
	killed := fleet[1]
	if err := killed.proc.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = killed.proc.cmd.Wait()
	fleet[1] = startFleetProxy(t, ctx, spawnProxyProcess(t, args...))
	checkNodes(fleet)
	t.Logf("nodes after the restart: %d, %d (was %d), %d", fleet[0].node, fleet[1].node, killed.node, fleet[2].node)
	load(fleet)

	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	for i := 1; i < len(ids); i++ {
		if ids[i] == ids[i-1] {
			t.Fatalf("ID %d issued twice", ids[i])
		}
	}
	if len(ids) != 2*3*200 {
		t.Fatalf("%d IDs, want %d", len(ids), 2*3*200)
	}
}

// issue takes n IDs from SELECT snowflake.nextval and n from INSERTs
// through the proxy at url, checking their node bits.
func issue(ctx context.Context, url string, node, n int, got func(int64)) error {
	c, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer c.Close(ctx)
	for i := range n {
		var a, b int64
		if err := c.QueryRow(ctx, "SELECT snowflake.nextval('s')").Scan(&a); err != nil {
			return err
		}
		if err := c.QueryRow(ctx, "INSERT INTO t (v) VALUES ($1) RETURNING id", i).Scan(&b); err != nil {
			return err
		}
		for _, id := range []int64{a, b} {
			if int(id>>12&1023) != node {
				return fmt.Errorf("ID %d has node %d, want %d", id, id>>12&1023, node)
			}
			got(id)
		}
	}
	return nil
}

func sameSet(a, b []int) bool {
	a, b = append([]int(nil), a...), append([]int(nil), b...)
	sort.Ints(a)
	sort.Ints(b)
	return fmt.Sprint(a) == fmt.Sprint(b)
}
