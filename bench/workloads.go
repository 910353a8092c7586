package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// column is one of the table's target columns. What runs in a column depends
// on the workload (see workload.variants); the proxy is always column proxy.
type column int

const (
	colProxy      column = iota // through snowflake-proxy
	colDirect                   // straight to the server (TCP 127.0.0.1)
	colPgBouncer                // through PgBouncer, session mode
	colShim                     // the shim (PL/pgSQL) called directly on the server
	colFloor                    // through the floor relay (bench/floor): the least any epoll relay costs
	colFloorUring               // through the io_uring floor relay: the least any relay costs
	numColumns
)

var columnNames = [numColumns]string{"proxy", "direct", "pgbouncer", "shim-direct", "floor", "floor-uring"}

// route is where a variant's pgbench connects.
type route int

const (
	viaProxy route = iota
	viaDirect
	viaPgBouncer
	viaFloor
	viaFloorUring
)

// variant is one target of a workload: a column, a route and a script.
type variant struct {
	Col   column
	Route route
	SQL   string // script body; empty for a built-in script
	Desc  string // for the legend
}

// workload is a row group of the table.
type workload struct {
	Name    string
	Title   string
	Builtin string // pgbench built-in script option, e.g. "-S"
	// PassThrough workloads run the same statement on every route, so the
	// latency the proxy adds can be compared with what PgBouncer adds.
	PassThrough bool
	Variants    []variant
}

const (
	sqlSelect1      = "SELECT 1;"
	sqlSfNextval    = "SELECT snowflake.nextval();"
	sqlNativeNext   = "SELECT nextval('s');"
	sqlInsertSf     = "INSERT INTO t_sf (payload) VALUES ('x');"
	sqlInsertSerial = "INSERT INTO t_serial (payload) VALUES ('x');"
)

// workloads are the workloads, in table order.
var workloads = []workload{
	{
		Name: "select1", Title: "SELECT 1", PassThrough: true,
		Variants: []variant{
			{colProxy, viaProxy, sqlSelect1, "SELECT 1 through the proxy"},
			{colDirect, viaDirect, sqlSelect1, "SELECT 1 direct"},
			{colPgBouncer, viaPgBouncer, sqlSelect1, "SELECT 1 through PgBouncer"},
			{colFloor, viaFloor, sqlSelect1, "SELECT 1 through the floor relay"},
			{colFloorUring, viaFloorUring, sqlSelect1, "SELECT 1 through the io_uring floor relay"},
		},
	},
	{
		Name: "nextval", Title: "snowflake.nextval()",
		Variants: []variant{
			{colProxy, viaProxy, sqlSfNextval, "SELECT snowflake.nextval() through the proxy (fast path)"},
			{colDirect, viaDirect, sqlNativeNext, "SELECT nextval('s') direct (native sequence)"},
			{colShim, viaDirect, sqlSfNextval, "SELECT snowflake.nextval() direct (shim)"},
		},
	},
	{
		Name: "insert", Title: "INSERT id default",
		Variants: []variant{
			{colProxy, viaProxy, sqlInsertSf, "INSERT INTO t_sf (snowflake default) through the proxy"},
			{colDirect, viaDirect, sqlInsertSerial, "INSERT INTO t_serial (bigserial) direct"},
			{colPgBouncer, viaPgBouncer, sqlInsertSerial, "INSERT INTO t_serial (bigserial) through PgBouncer"},
			{colShim, viaDirect, sqlInsertSf, "INSERT INTO t_sf direct (shim default)"},
			{colFloor, viaFloor, sqlInsertSerial, "INSERT INTO t_serial (bigserial) through the floor relay"},
			{colFloorUring, viaFloorUring, sqlInsertSerial, "INSERT INTO t_serial (bigserial) through the io_uring floor relay"},
		},
	},
	{
		Name: "select-only", Title: "pgbench -S", Builtin: "-S", PassThrough: true,
		Variants: []variant{
			{colProxy, viaProxy, "", "pgbench -S through the proxy"},
			{colDirect, viaDirect, "", "pgbench -S direct"},
			{colPgBouncer, viaPgBouncer, "", "pgbench -S through PgBouncer"},
			{colFloor, viaFloor, "", "pgbench -S through the floor relay"},
			{colFloorUring, viaFloorUring, "", "pgbench -S through the io_uring floor relay"},
		},
	},
}

// selectWorkloads filters by -only: a comma-separated list of names.
func selectWorkloads(only string) ([]workload, error) {
	if only == "" {
		return workloads, nil
	}
	var out []workload
	for _, name := range strings.Split(only, ",") {
		name = strings.TrimSpace(name)
		found := false
		for _, w := range workloads {
			if w.Name == name {
				out = append(out, w)
				found = true
			}
		}
		if !found {
			return nil, fmt.Errorf("unknown workload %q in -only (have %s)", name, workloadNames())
		}
	}
	return out, nil
}

func workloadNames() string {
	var names []string
	for _, w := range workloads {
		names = append(names, w.Name)
	}
	return strings.Join(names, ", ")
}

// scriptPath writes a variant's script under dir and returns its path.
func scriptPath(dir string, w workload, v variant) (string, error) {
	if v.SQL == "" {
		return "", nil
	}
	p := filepath.Join(dir, "scripts", fmt.Sprintf("%s-%s.sql", w.Name, columnNames[v.Col]))
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return "", err
	}
	return p, os.WriteFile(p, []byte(v.SQL+"\n"), 0o644)
}
