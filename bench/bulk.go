package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// The bulk subcommand measures the statements that make many IDs at once:
//
//   - copy: COPY ... FROM STDIN through the proxy into a table whose id
//     defaults to snowflake.nextval() (the proxy appends the IDs to the
//     rows, wire/copyin.go) against the same COPY through the proxy into a
//     bigserial table, in the text, csv and binary formats;
//   - insert: INSERT ... SELECT from generate_series into the same two
//     tables, through the proxy and on a direct connection (the server
//     evaluates the defaults row by row: the shim's per-row path,
//     docs/state-model.md, "Blocks");
//   - perrow: SELECT count(DISTINCT snowflake.nextval()) over
//     generate_series against the same with a native nextval, through the
//     proxy and directly;
//   - single: rows/50 INSERTs of one row into the same two tables, one
//     statement per transaction in the simple protocol, through the proxy
//     and directly: on a direct connection the server plans the default
//     for every statement, which a statement of many rows hides.
//
// Each round runs every case of both tables, interleaved, from an emptied
// table after a CHECKPOINT; the report is the median of the rounds and
// the ratio.
//
// With -pgbin, the server runs from that directory's binaries: a scratch
// copy of a PostgreSQL tree into which pgEdge's C extension is installed
// (bench/README.md, "The C extension"). The insert and perrow parts then
// also run in a second database of the same server where CREATE
// EXTENSION snowflake, sent directly, loads the C extension: the
// yardstick, in the same run.
//
//	go run ./bench bulk [-rows 1000000] [-rounds 3] [-only copy,insert,perrow,single] [-pgbin DIR]

// bulkTimeout bounds one COPY.
const bulkTimeout = 10 * time.Minute

func runBulk(args []string) int {
	fs := flag.NewFlagSet("bench bulk", flag.ContinueOnError)
	rows := fs.Int("rows", 1_000_000, "rows per COPY")
	rounds := fs.Int("rounds", 3, "measurements per format and table (median reported)")
	only := fs.String("only", "copy,insert,perrow,single", "comma-separated parts to run: copy, insert, perrow, single")
	pgbin := fs.String("pgbin", "", "server binaries of a PostgreSQL tree with pgEdge's snowflake extension installed: also measure the C extension")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *rows < 1 || *rounds < 1 {
		fmt.Fprintln(os.Stderr, "bench bulk: -rows and -rounds must be positive")
		return 2
	}
	parts := map[string]bool{}
	for _, p := range strings.Split(*only, ",") {
		switch p = strings.TrimSpace(p); p {
		case "copy", "insert", "perrow", "single":
			parts[p] = true
		default:
			fmt.Fprintf(os.Stderr, "bench bulk: unknown part %q in -only\n", p)
			return 2
		}
	}
	if err := measureBulk(context.Background(), *rows, *rounds, parts, *pgbin); err != nil {
		fmt.Fprintln(os.Stderr, "bench bulk:", err)
		return 1
	}
	return 0
}

// bulkFormat is one COPY format: its options and its data.
type bulkFormat struct {
	name, options string
	data          []byte
}

func bulkData(rows int) []bulkFormat {
	var text, csv bytes.Buffer
	bin := bytes.NewBuffer([]byte("PGCOPY\n\xff\r\n\x00\x00\x00\x00\x00\x00\x00\x00\x00"))
	for i := 0; i < rows; i++ {
		s := "row " + strconv.Itoa(i) + ", some text"
		fmt.Fprintf(&text, "%d\t%s\n", i, s)
		fmt.Fprintf(&csv, "%d,\"%s\"\n", i, s)
		b := binary.BigEndian.AppendUint16(nil, 2)
		b = binary.BigEndian.AppendUint32(b, 4)
		b = binary.BigEndian.AppendUint32(b, uint32(i))
		b = binary.BigEndian.AppendUint32(b, uint32(len(s)))
		bin.Write(append(b, s...))
	}
	bin.Write([]byte{0xff, 0xff})
	return []bulkFormat{
		{"text", "", text.Bytes()},
		{"csv", " WITH (FORMAT csv)", csv.Bytes()},
		{"binary", " WITH (FORMAT binary)", bin.Bytes()},
	}
}

// bulkTables are the two targets, snowflake default first.
var bulkTables = []struct{ name, ddl string }{
	{"b_sf", "CREATE TABLE b_sf (id bigint PRIMARY KEY DEFAULT snowflake.nextval(), v int, s text)"},
	{"b_serial", "CREATE TABLE b_serial (id bigserial PRIMARY KEY, v int, s text)"},
}

// extensionDB creates the database of the C extension next to the
// bench database, installs the extension there with a direct connection
// (the proxy would install its shim), checks that snowflake.nextval is
// the extension's C function, and returns that connection with node 1
// set and the bulk tables made.
func extensionDB(ctx context.Context, direct *pgx.Conn, port int) (_ *pgx.Conn, err error) {
	const db = benchDB + "_ext"
	if err := execTimeout(ctx, direct, "CREATE DATABASE "+db); err != nil {
		return nil, err
	}
	cfg, err := pgx.ParseConfig(fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable&connect_timeout=10", port, db))
	if err != nil {
		return nil, err
	}
	cfg.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol
	ext, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			ext.Close(context.Background())
		}
	}()
	if err := execTimeout(ctx, ext, "CREATE EXTENSION snowflake"); err != nil {
		return nil, fmt.Errorf("the C extension (is it installed in the -pgbin tree?): %w", err)
	}
	var lang, version string
	if err := ext.QueryRow(ctx, `SELECT l.lanname, e.extversion FROM pg_proc p
		JOIN pg_language l ON l.oid = p.prolang, pg_extension e
		WHERE p.oid = 'snowflake.nextval(regclass)'::regprocedure AND e.extname = 'snowflake'`).Scan(&lang, &version); err != nil {
		return nil, err
	}
	if lang != "c" {
		return nil, fmt.Errorf("snowflake.nextval in %s is in language %s, not the C extension's", db, lang)
	}
	fmt.Printf("bench bulk: pgEdge's snowflake %s (C) in database %s\n", version, db)
	for _, t := range bulkTables {
		if err := execTimeout(ctx, ext, t.ddl); err != nil {
			return nil, err
		}
	}
	for _, sql := range []string{"CREATE SEQUENCE b_native", "SET snowflake.node = 1"} {
		if err := execTimeout(ctx, ext, sql); err != nil {
			return nil, err
		}
	}
	return ext, nil
}

func measureBulk(ctx context.Context, rows, rounds int, parts map[string]bool, pgbin string) error {
	root, err := moduleRoot()
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "sfbulk-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	if err := chmodTraversable(dir); err != nil {
		return err
	}
	fmt.Println("bench bulk: building the proxy, starting PostgreSQL")
	bin, err := buildProxy(ctx, root, dir)
	if err != nil {
		return err
	}
	srv, err := startPostgresFrom(ctx, dir, upSocket, pgbin)
	if err != nil {
		return err
	}
	defer srv.Stop(context.Background())
	proxy := &proxyTarget{bin: bin, upstream: proxyUpstream(upSocket, srv.SocketDir(), srv.Port()), dir: dir}
	if err := proxy.start(ctx); err != nil {
		return err
	}
	defer proxy.stop()
	conn, err := connect(ctx, proxy.port)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	direct, err := connect(ctx, srv.Port())
	if err != nil {
		return err
	}
	defer direct.Close(context.Background())
	if err := execTimeout(ctx, conn, "CREATE EXTENSION snowflake"); err != nil {
		return err
	}
	for _, t := range bulkTables {
		if err := execTimeout(ctx, conn, t.ddl); err != nil {
			return err
		}
	}
	if err := waitBulkFastPath(ctx, conn); err != nil {
		return err
	}
	if parts["copy"] {
		if err := measureBulkCopy(ctx, conn, direct, rows, rounds); err != nil {
			return err
		}
	}
	var ext *pgx.Conn
	if pgbin != "" && (parts["insert"] || parts["perrow"] || parts["single"]) {
		if ext, err = extensionDB(ctx, direct, srv.Port()); err != nil {
			return err
		}
		defer ext.Close(context.Background())
	}
	if parts["insert"] || parts["perrow"] || parts["single"] {
		if err := measureServerRows(ctx, conn, direct, ext, rows, rounds, parts); err != nil {
			return err
		}
	}
	return nil
}

// measureBulkCopy is the copy part.
func measureBulkCopy(ctx context.Context, conn, direct *pgx.Conn, rows, rounds int) error {
	formats := bulkData(rows)
	times := map[string][]time.Duration{}
	for r := 1; r <= rounds; r++ {
		for _, f := range formats {
			for _, t := range bulkTables {
				if err := execTimeout(ctx, direct, "TRUNCATE "+t.name); err != nil {
					return err
				}
				if err := execTimeout(ctx, direct, "CHECKPOINT"); err != nil {
					return err
				}
				d, err := bulkCopy(ctx, conn, t.name, f, rows)
				if err != nil {
					return err
				}
				key := f.name + "/" + t.name
				times[key] = append(times[key], d)
				fmt.Printf("bench bulk: round %d, %s into %s: %d ms\n", r, f.name, t.name, d.Milliseconds())
			}
		}
	}
	fmt.Printf("\nCOPY of %d rows through the proxy, median of %d\n\n", rows, rounds)
	fmt.Println("| format | snowflake default | bigserial | ratio |")
	fmt.Println("|---|--:|--:|--:|")
	for _, f := range formats {
		sf, serial := medianDuration(times[f.name+"/b_sf"]), medianDuration(times[f.name+"/b_serial"])
		fmt.Printf("| %s | %d ms | %d ms | %.2fx |\n", f.name, sf.Milliseconds(), serial.Milliseconds(), float64(sf)/float64(serial))
	}
	return nil
}

// bulkCopy times one COPY and checks its row count.
func bulkCopy(ctx context.Context, conn *pgx.Conn, table string, f bulkFormat, rows int) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, bulkTimeout)
	defer cancel()
	start := time.Now()
	tag, err := conn.PgConn().CopyFrom(ctx, bytes.NewReader(f.data), "COPY "+table+" (v, s) FROM STDIN"+f.options)
	d := time.Since(start)
	if err != nil {
		return 0, fmt.Errorf("%s COPY into %s: %w", f.name, table, err)
	}
	if tag.RowsAffected() != int64(rows) {
		return 0, fmt.Errorf("%s COPY into %s: %q, want %d rows", f.name, table, tag, rows)
	}
	return d, nil
}

// shimWorkSQL marks the server's snowflake.nextval work: the slow path's
// calls (counted by track_functions) and the values of the block sequences
// that per-row calls draw (docs/state-model.md, "Blocks"); the query of
// internal/pgtest.ShimWorkSQL as one text, written out here because a
// command does not import the tests' package.
const shimWorkSQL = `SELECT coalesce(pg_catalog.pg_stat_get_xact_function_calls(
		'snowflake._nextval_slow(regclass)'::pg_catalog.regprocedure), 0)::text || '/' ||
	coalesce((SELECT pg_catalog.string_agg(pg_catalog.pg_sequence_last_value(c.oid)::text, ',' ORDER BY c.oid)
		FROM pg_catalog.pg_class c
		WHERE c.relnamespace = 'snowflake'::pg_catalog.regnamespace AND c.relname LIKE '\_blk\_%'), '')`

// waitBulkFastPath waits until a COPY into b_sf runs no shim call: the
// proxy fills snowflake defaults once its watch of the catalog is armed.
func waitBulkFastPath(ctx context.Context, conn *pgx.Conn) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		tx, err := conn.Begin(ctx)
		if err != nil {
			return err
		}
		var before, after string
		if err := tx.QueryRow(ctx, shimWorkSQL).Scan(&before); err != nil {
			_ = tx.Rollback(ctx)
			return err
		}
		if _, err := conn.PgConn().CopyFrom(ctx, bytes.NewReader([]byte("1\tx\n")), "COPY b_sf (v, s) FROM STDIN"); err != nil {
			_ = tx.Rollback(ctx)
			return err
		}
		err = tx.QueryRow(ctx, shimWorkSQL).Scan(&after)
		_ = tx.Rollback(ctx)
		if err != nil {
			return err
		}
		if after == before {
			return nil
		}
		if time.Now().After(deadline) {
			return errors.New("COPY into b_sf still runs the shim after 30 s: the proxy does not fill its defaults")
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func medianDuration(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}
