package main

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// serverRowsCase is one statement of the insert, perrow and single parts,
// on a snowflake sequence and on its native baseline.
type serverRowsCase struct {
	part, name string
	// sf and native are the statements (%d: the row count); table, when
	// set, is emptied before each.
	sf, native        string
	sfTable, natTable string
}

var serverRowsCases = []serverRowsCase{
	{
		part: "insert", name: "INSERT ... SELECT",
		sf:      "INSERT INTO b_sf (v, s) SELECT g, 'row ' || g FROM generate_series(1, %d) g",
		native:  "INSERT INTO b_serial (v, s) SELECT g, 'row ' || g FROM generate_series(1, %d) g",
		sfTable: "b_sf", natTable: "b_serial",
	},
	{
		part: "perrow", name: "per-row nextval",
		sf:     "SELECT count(DISTINCT snowflake.nextval()) FROM generate_series(1, %d)",
		native: "SELECT count(DISTINCT nextval('b_native')) FROM generate_series(1, %d)",
	},
	{
		part: "single", name: "single-row INSERTs",
		sf:      "INSERT INTO b_sf (v, s) VALUES (1, 'row')",
		native:  "INSERT INTO b_serial (v, s) VALUES (1, 'row')",
		sfTable: "b_sf", natTable: "b_serial",
	},
}

// singleStatements is how many statements the single part runs for rows.
func singleStatements(rows int) int { return max(rows/50, 1) }

// rowsPath is where a statement runs: conn, whose tables admin empties
// (the proxy's tables are those of the direct connection's database).
type rowsPath struct {
	name        string
	conn, admin *pgx.Conn
}

// measureServerRows runs the insert, perrow and single parts through the proxy
// (conn), on the direct connection and, when ext is not nil, on the C
// extension's database, and prints their medians.
func measureServerRows(ctx context.Context, conn, direct, ext *pgx.Conn, rows, rounds int, parts map[string]bool) error {
	if err := execTimeout(ctx, direct, "CREATE SEQUENCE IF NOT EXISTS b_native"); err != nil {
		return err
	}
	// The proxy's node, for the direct connection's shim calls.
	if err := execTimeout(ctx, direct, "SET snowflake.node = 1"); err != nil {
		return err
	}
	paths := []rowsPath{{"proxy", conn, direct}, {"direct", direct, direct}}
	if ext != nil {
		paths = append(paths, rowsPath{"C extension", ext, ext})
	}
	times := map[string][]time.Duration{}
	for r := 1; r <= rounds; r++ {
		for _, c := range serverRowsCases {
			if !parts[c.part] {
				continue
			}
			for _, p := range paths {
				for _, side := range []struct{ kind, sql, table string }{
					{"snowflake", c.sf, c.sfTable}, {"native", c.native, c.natTable},
				} {
					if side.table != "" {
						if err := execTimeout(ctx, p.admin, "TRUNCATE "+side.table); err != nil {
							return err
						}
						if err := execTimeout(ctx, p.admin, "CHECKPOINT"); err != nil {
							return err
						}
					}
					sql := side.sql
					if c.part != "single" {
						sql = fmt.Sprintf(sql, rows)
					}
					d, err := timeRows(ctx, p.conn, sql, c.part, rows)
					if err != nil {
						return fmt.Errorf("%s %s %s: %w", c.name, p.name, side.kind, err)
					}
					key := c.part + "/" + p.name + "/" + side.kind
					times[key] = append(times[key], d)
					fmt.Printf("bench bulk: round %d, %s %s, %s: %d ms\n", r, c.name, p.name, side.kind, d.Milliseconds())
				}
			}
		}
	}
	single := ""
	if parts["single"] {
		single = fmt.Sprintf(" (single: %d statements)", singleStatements(rows))
	}
	fmt.Printf("\nRows evaluated by the server, %d rows%s, median of %d\n\n", rows, single, rounds)
	fmt.Println("| statement | path | snowflake | baseline | ratio |")
	fmt.Println("|---|---|--:|--:|--:|")
	for _, c := range serverRowsCases {
		if !parts[c.part] {
			continue
		}
		base := "bigserial"
		if c.part == "perrow" {
			base = "native nextval"
		}
		for _, p := range paths {
			sf := medianDuration(times[c.part+"/"+p.name+"/snowflake"])
			nat := medianDuration(times[c.part+"/"+p.name+"/native"])
			fmt.Printf("| %s (vs %s) | %s | %d ms | %d ms | %.2fx |\n", c.name, base, p.name,
				sf.Milliseconds(), nat.Milliseconds(), float64(sf)/float64(nat))
		}
	}
	return nil
}

// timeRows times one statement and checks that it made rows rows (an
// INSERT's tag, a count's value); for the single part, the statements of
// one row each.
func timeRows(ctx context.Context, conn *pgx.Conn, sql, part string, rows int) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, bulkTimeout)
	defer cancel()
	start := time.Now()
	var got int64
	if part == "single" {
		rows = singleStatements(rows)
		for range rows {
			tag, err := conn.Exec(ctx, sql, pgx.QueryExecModeSimpleProtocol)
			if err != nil {
				return 0, err
			}
			got += tag.RowsAffected()
		}
	} else if part == "insert" {
		tag, err := conn.Exec(ctx, sql)
		if err != nil {
			return 0, err
		}
		got = tag.RowsAffected()
	} else if err := conn.QueryRow(ctx, sql).Scan(&got); err != nil {
		return 0, err
	}
	d := time.Since(start)
	if got != int64(rows) {
		return 0, fmt.Errorf("%d rows, want %d", got, rows)
	}
	return d, nil
}
