package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/snowflake-proxy/snowflake-proxy/internal/pgserver"
)

// benchDB is the database every workload runs in.
const benchDB = "bench"

// serverSettings is the tuning of every run's PostgreSQL, on top of the
// pgserver defaults (fsync on, track_functions 'pl'). Durability is relaxed
// for client commits (synchronous_commit off) so the INSERT workloads measure
// the ID paths rather than this machine's fsync latency; autovacuum is off
// and checkpoints are spaced out (plus one CHECKPOINT before every
// measurement) so that background work does not land in random runs.
var serverSettings = map[string]string{
	"shared_buffers":     "'256MB'",
	"max_connections":    "100",
	"synchronous_commit": "off",
	"autovacuum":         "off",
	"checkpoint_timeout": "'30min'",
	"max_wal_size":       "'4GB'",
	"jit":                "off",
}

// reportedSettings are read back from the running server for the report.
var reportedSettings = []string{
	"shared_buffers", "max_connections", "synchronous_commit", "fsync",
	"autovacuum", "checkpoint_timeout", "max_wal_size", "jit", "track_functions", "ssl",
}

// startPostgres starts the private server with its data under dir/pg (kept
// with -keep), then creates the bench database. For upTLS it serves TLS
// with a certificate made for the run (dir/pg/tls); plaintext sessions
// are still accepted, for the direct targets.
func startPostgres(ctx context.Context, dir string, k upstreamKind) (*pgserver.Server, error) {
	return startPostgresFrom(ctx, dir, k, "")
}

// startPostgresFrom is startPostgres with the server binaries of binDir
// (empty: the machine's own, as pgserver finds them).
func startPostgresFrom(ctx context.Context, dir string, k upstreamKind, binDir string) (*pgserver.Server, error) {
	settings := map[string]string{}
	for name, v := range serverSettings {
		settings[name] = v
	}
	if k == upTLS {
		_, uid, gid, err := unprivileged()
		if err != nil {
			return nil, err
		}
		certFile, keyFile, err := writeServerCert(filepath.Join(dir, "pg", "tls"), uid, gid)
		if err != nil {
			return nil, err
		}
		for name, v := range tlsSettings(certFile, keyFile) {
			settings[name] = v
		}
	}
	srv, err := pgserver.Start(ctx, pgserver.Options{
		BinDir:   binDir,
		DataDir:  filepath.Join(dir, "pg", "data"),
		Settings: settings,
	})
	if err != nil {
		return nil, err
	}
	conn, err := pgx.Connect(ctx, srv.URL("postgres"))
	if err != nil {
		srv.Stop(context.Background())
		return nil, fmt.Errorf("connect to postgres: %w", err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+benchDB); err != nil {
		srv.Stop(context.Background())
		return nil, fmt.Errorf("create database: %w", err)
	}
	return srv, nil
}

// serverFacts returns the server version and the reported settings as
// "name=value" pairs.
func serverFacts(ctx context.Context, conn *pgx.Conn) (version string, settings []string, err error) {
	if err := conn.QueryRow(ctx, "SHOW server_version").Scan(&version); err != nil {
		return "", nil, fmt.Errorf("server version: %w", err)
	}
	rows, err := conn.Query(ctx, "SELECT name, setting, coalesce(unit, '') FROM pg_settings WHERE name = ANY($1)", reportedSettings)
	if err != nil {
		return "", nil, fmt.Errorf("settings: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var name, value, unit string
		if err := rows.Scan(&name, &value, &unit); err != nil {
			return "", nil, err
		}
		settings = append(settings, name+"="+humanSetting(value, unit))
	}
	sort.Strings(settings)
	return version, settings, rows.Err()
}

// humanSetting renders pg_settings values with their unit ("32768" "8kB" ->
// "256MB").
func humanSetting(value, unit string) string {
	var n int64
	if _, err := fmt.Sscan(value, &n); err != nil || unit == "" {
		return value
	}
	switch unit {
	case "8kB":
		n *= 8 << 10
	case "kB":
		n <<= 10
	case "MB":
		n <<= 20
	case "s":
		return fmt.Sprintf("%ds", n)
	case "ms":
		return fmt.Sprintf("%dms", n)
	default:
		return value + unit
	}
	switch {
	case n%(1<<30) == 0:
		return fmt.Sprintf("%dGB", n>>30)
	case n%(1<<20) == 0:
		return fmt.Sprintf("%dMB", n>>20)
	default:
		return fmt.Sprintf("%dkB", n>>10)
	}
}

// chmodTraversable lets the unprivileged server and PgBouncer users reach
// files under dir (os.MkdirTemp creates it 0700).
func chmodTraversable(dir string) error {
	if err := os.Chmod(dir, 0o755); err != nil {
		return fmt.Errorf("chmod %s: %w", dir, err)
	}
	return nil
}

// oneLine flattens an error message for a table cell or log line.
func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}
