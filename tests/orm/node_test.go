package orm

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

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

// TestNodePostgres runs node/insert.js (node-postgres) through the proxy.
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
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "pg")); err != nil {
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

func TestNodePostgres(t *testing.T) {
	nodeBin, dir := nodeSetup(t)
	e := newEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, nodeBin, "insert.js")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "PGURL="+e.url)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("node insert.js: %v\nstdout: %s\nstderr: %s", err, stdout.String(), stderr.String())
	}
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
