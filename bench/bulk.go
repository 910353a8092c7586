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
	"time"

	"github.com/jackc/pgx/v5"
)

// The bulk subcommand measures COPY ... FROM STDIN through the proxy into a
// table whose id defaults to snowflake.nextval() (the proxy appends the IDs
// to the rows, wire/copyin.go) against the same COPY through the proxy into
// a bigserial table, in the text, csv and binary formats. Each round loads
// every format into both tables, interleaved, from an emptied table after
// a CHECKPOINT; the report is the median of the rounds and the ratio.
//
//	go run ./bench bulk [-rows 1000000] [-rounds 3]

// bulkTimeout bounds one COPY.
const bulkTimeout = 10 * time.Minute

func runBulk(args []string) int {
	fs := flag.NewFlagSet("bench bulk", flag.ContinueOnError)
	rows := fs.Int("rows", 1_000_000, "rows per COPY")
	rounds := fs.Int("rounds", 3, "measurements per format and table (median reported)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *rows < 1 || *rounds < 1 {
		fmt.Fprintln(os.Stderr, "bench bulk: -rows and -rounds must be positive")
		return 2
	}
	if err := measureBulk(context.Background(), *rows, *rounds); err != nil {
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

func measureBulk(ctx context.Context, rows, rounds int) error {
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
	srv, err := startPostgres(ctx, dir, upSocket)
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

// waitBulkFastPath waits until a COPY into b_sf runs no shim call: the
// proxy fills snowflake defaults once its watch of the catalog is armed.
func waitBulkFastPath(ctx context.Context, conn *pgx.Conn) error {
	const calls = "SELECT coalesce(pg_catalog.pg_stat_get_xact_function_calls('snowflake.nextval(regclass)'::pg_catalog.regprocedure), 0)"
	deadline := time.Now().Add(30 * time.Second)
	for {
		tx, err := conn.Begin(ctx)
		if err != nil {
			return err
		}
		if _, err := conn.PgConn().CopyFrom(ctx, bytes.NewReader([]byte("1\tx\n")), "COPY b_sf (v, s) FROM STDIN"); err != nil {
			_ = tx.Rollback(ctx)
			return err
		}
		var n int64
		err = tx.QueryRow(ctx, calls).Scan(&n)
		_ = tx.Rollback(ctx)
		if err != nil {
			return err
		}
		if n == 0 {
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
