package orm

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/snowflake-proxy/snowflake-proxy/internal/pgtest"
)

// nodeOutput is what node/insert.js prints. node-postgres returns int8 as
// strings (no precision loss).
type nodeOutput struct {
	Simple   []string `json:"simple"`
	Param    []string `json:"param"`
	Prepared []string `json:"prepared"`
	Many     []string `json:"many"`
	ReadBack []struct {
		ID   string `json:"id"`
		Name string `json:"name"`
		Via  string `json:"via"`
		Node int    `json:"node"`
	} `json:"readBack"`
}

// nodeSetup returns the node binary and the directory of the node
// scripts, with their locked dependencies installed (npm ci when one is
// missing). Without node and npm it fails: CI must install them.
func nodeSetup(t *testing.T) (nodeBin, dir string) {
	t.Helper()
	nodeBin = pgtest.Tool(t, "node")
	npm := pgtest.Tool(t, "npm")
	dir, err := filepath.Abs("node")
	if err != nil {
		t.Fatal(err)
	}
	_, errPg := os.Stat(filepath.Join(dir, "node_modules", "pg"))
	_, errCopy := os.Stat(filepath.Join(dir, "node_modules", "pg-copy-streams"))
	if errPg != nil || errCopy != nil {
		args := []string{"ci", "--no-audit", "--no-fund"}
		if _, err := os.Stat(filepath.Join(dir, "package-lock.json")); err != nil {
			args[0] = "install"
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, npm, args...)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("npm %s in %s: %v\n%s", args[0], dir, err, out)
		}
	}
	return nodeBin, dir
}

// runNode runs the node script in dir with PGURL=url and returns what it
// printed; it fails the test with both outputs when the script fails.
func runNode(ctx context.Context, t *testing.T, nodeBin, dir, script, url string) *bytes.Buffer {
	t.Helper()
	cmd := exec.CommandContext(ctx, nodeBin, script)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "PGURL="+url)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("node %s: %v\nstdout: %s\nstderr: %s", script, err, stdout.String(), stderr.String())
	}
	return &stdout
}

// TestNodePostgres runs node/insert.js (node-postgres) through the proxy.
func TestNodePostgres(t *testing.T) {
	nodeBin, dir := nodeSetup(t)
	e := newEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	stdout := runNode(ctx, t, nodeBin, dir, "insert.js", e.url)
	var out nodeOutput
	if err := json.Unmarshal(stdout.Bytes(), &out); err != nil {
		t.Fatalf("node insert.js printed no JSON: %v\n%s", err, stdout.String())
	}

	parse := func(what string, s []string, want int) []int64 {
		t.Helper()
		if len(s) != want {
			t.Errorf("%s: %d ids, want %d: %v", what, len(s), want, s)
		}
		ids := make([]int64, len(s))
		for i, v := range s {
			id, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				t.Fatalf("%s: id %q: %v", what, v, err)
			}
			ids[i] = id
		}
		return ids
	}
	simple := parse("simple protocol", out.Simple, 3)
	param := parse("unnamed extended", out.Param, 2)
	prepared := parse("named prepared statement", out.Prepared, 3)
	many := parse("multi-row prepared", out.Many, 2)
	var all []int64
	for _, part := range [][]int64{simple, param, prepared, many} {
		all = append(all, part...)
	}
	// One connection, one sequence: strictly increasing in issue order.
	e.checkIDs(t, "node-postgres", all)

	if len(out.ReadBack) != len(all) {
		t.Fatalf("read back %d rows, want %d", len(out.ReadBack), len(all))
	}
	names := []string{"s1", "s2", "s3", "p1", "p2", "n1", "n2", "n3", "m1", "m2"}
	for i, r := range out.ReadBack {
		if r.ID != strconv.FormatInt(all[i], 10) || r.Name != names[i] || r.Node != node {
			t.Errorf("row %d (by id): %+v, want id %d name %s node %d", i, r, all[i], names[i], node)
		}
	}
}

// TestNodePgCopyStreams runs node/copy.js: COPY ... FROM STDIN through the
// proxy with pg-copy-streams, text and csv, in chunks of 7 bytes. Every
// row gets an id from the proxy (a count below 3072: while the proxy
// holds a lease the shim issues 3072 and above), increasing in row order,
// and the values the client sent.
func TestNodePgCopyStreams(t *testing.T) {
	nodeBin, dir := nodeSetup(t)
	e := newEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := pgx.Connect(ctx, e.url)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	if _, err := c.Exec(ctx, "CREATE TABLE copy_items (n serial, id bigint PRIMARY KEY DEFAULT snowflake.nextval(), v text, w int)"); err != nil {
		t.Fatal(err)
	}
	waitCopyFastPath(t, ctx, c)

	stdout := runNode(ctx, t, nodeBin, dir, "copy.js", e.url)
	var out struct {
		Text, CSV int
		Rows      []struct {
			ID string `json:"id"`
			V  string `json:"v"`
			W  int    `json:"w"`
		}
	}
	if err := json.Unmarshal(stdout.Bytes(), &out); err != nil {
		t.Fatalf("node copy.js printed no JSON: %v\n%s", err, stdout.String())
	}
	const rows = 2000
	if out.Text != rows || out.CSV != rows || len(out.Rows) != 2*rows {
		t.Fatalf("COPY counts %d and %d, %d rows read back; want %d, %d, %d", out.Text, out.CSV, len(out.Rows), rows, rows, 2*rows)
	}
	ids := make([]int64, len(out.Rows))
	for i, r := range out.Rows {
		want := fmt.Sprintf("text %d", i)
		if i >= rows {
			want = fmt.Sprintf("csv, %d\n(two lines)", i-rows)
		}
		if r.V != want || r.W != i%rows {
			t.Fatalf("row %d: %q, %d; want %q, %d", i, r.V, r.W, want, i%rows)
		}
		if ids[i], err = strconv.ParseInt(r.ID, 10, 64); err != nil {
			t.Fatal(err)
		}
		if count := ids[i] & 4095; count >= 3072 {
			t.Fatalf("row %d: id %d has count %d, not one of the proxy's", i, ids[i], count)
		}
	}
	e.checkIDs(t, "pg-copy-streams rows in row order", ids)
}

// waitCopyFastPath waits until a COPY into copy_items runs no shim call:
// the proxy fills defaults once its watch of the catalog is armed.
func waitCopyFastPath(t *testing.T, ctx context.Context, c *pgx.Conn) {
	t.Helper()
	for {
		tx, err := c.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var slow0, slow1 int64
		var before, after string
		if err := tx.QueryRow(ctx, pgtest.ShimWorkSQL).Scan(&slow0, &before); err != nil {
			t.Fatal(err)
		}
		if _, err := c.PgConn().CopyFrom(ctx, strings.NewReader("probe\t0\n"), "COPY copy_items (v, w) FROM STDIN"); err != nil {
			t.Fatal(err)
		}
		err = tx.QueryRow(ctx, pgtest.ShimWorkSQL).Scan(&slow1, &after)
		_ = tx.Rollback(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if slow1 == slow0 && after == before {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatal("COPY into copy_items still runs the shim: the proxy does not fill its defaults")
		case <-time.After(50 * time.Millisecond):
		}
	}
}
