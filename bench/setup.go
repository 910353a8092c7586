package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
)

// setupTimeout bounds each setup step (pgbench -i included).
const setupTimeout = 5 * time.Minute

// Setup statements. The extension and t_sf need the proxy (it installs the
// shim); the others fall back to a direct connection when the proxy fails,
// so the direct and PgBouncer columns can still be measured.
var (
	proxyOnlySetup = []string{
		"CREATE EXTENSION snowflake",
		"CREATE TABLE t_sf (id bigint PRIMARY KEY DEFAULT snowflake.nextval(), payload text)",
	}
	anyRouteSetup = []string{
		"CREATE TABLE t_serial (id bigserial PRIMARY KEY, payload text)",
		"CREATE SEQUENCE s",
		// Direct sessions calling the shim need a node, as on a pgEdge
		// server (postgresql.conf there); the proxy's sessions get --node 1
		// in their startup packet, which takes precedence.
		"ALTER DATABASE " + benchDB + " SET snowflake.node = 1",
	}
)

// setupDatabase prepares the bench database through the proxy (proxyPort 0:
// the proxy is unavailable), whose clients use proxySSLMode. It returns
// notes for the report: fallbacks taken and failures that will show up as
// errors in the table.
func setupDatabase(ctx context.Context, proxyPort int, proxySSLMode string, directPort int) []string {
	var notes []string
	var proxyConn *pgx.Conn
	var proxyErr error
	if proxyPort == 0 {
		proxyErr = fmt.Errorf("proxy unavailable")
	} else {
		proxyConn, proxyErr = connectSSL(ctx, proxyPort, proxySSLMode)
	}
	if proxyConn != nil {
		defer proxyConn.Close(context.Background())
	}
	for _, sql := range proxyOnlySetup {
		if proxyErr != nil {
			notes = append(notes, fmt.Sprintf("setup skipped (%v): %s", proxyErr, sql))
			continue
		}
		if err := execTimeout(ctx, proxyConn, sql); err != nil {
			notes = append(notes, fmt.Sprintf("setup failed through the proxy: %s: %s", sql, oneLine(err.Error())))
			// The connection may be unusable now; the rest goes direct.
			proxyErr = fmt.Errorf("proxy failed earlier setup")
		}
	}
	direct, err := connect(ctx, directPort)
	if err != nil {
		return append(notes, fmt.Sprintf("setup: direct connection failed: %v", err))
	}
	defer direct.Close(context.Background())
	for _, sql := range anyRouteSetup {
		if proxyErr == nil {
			err := execTimeout(ctx, proxyConn, sql)
			if err == nil {
				continue
			}
			proxyErr = err
			notes = append(notes, fmt.Sprintf("setup through the proxy failed, done direct: %s: %s", sql, oneLine(err.Error())))
		}
		if err := execTimeout(ctx, direct, sql); err != nil {
			notes = append(notes, fmt.Sprintf("setup failed direct: %s: %s", sql, oneLine(err.Error())))
		}
	}
	if proxyErr == nil {
		err := pgbenchInit(ctx, proxyPort, proxySSLMode)
		if err == nil {
			return notes
		}
		notes = append(notes, fmt.Sprintf("pgbench -i through the proxy failed, done direct: %s", oneLine(err.Error())))
	}
	if err := pgbenchInit(ctx, directPort, "disable"); err != nil {
		notes = append(notes, fmt.Sprintf("pgbench -i failed direct: %s", oneLine(err.Error())))
	}
	return notes
}

// connect opens a simple-protocol connection to bench on 127.0.0.1:port
// without TLS.
func connect(ctx context.Context, port int) (*pgx.Conn, error) {
	return connectSSL(ctx, port, "disable")
}

// connectSSL is connect with sslmode (disable, or require for a relay in
// a -client-tls run).
func connectSSL(ctx context.Context, port int, sslmode string) (*pgx.Conn, error) {
	cfg, err := pgx.ParseConfig(fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=%s&connect_timeout=10", port, benchDB, sslmode))
	if err != nil {
		return nil, err
	}
	cfg.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol
	return pgx.ConnectConfig(ctx, cfg)
}

func execTimeout(ctx context.Context, conn *pgx.Conn, sql string) error {
	ctx, cancel := context.WithTimeout(ctx, setupTimeout)
	defer cancel()
	_, err := conn.Exec(ctx, sql)
	return err
}

// pgbenchInit runs pgbench -i -s 1 on 127.0.0.1:port with sslmode.
func pgbenchInit(ctx context.Context, port int, sslmode string) error {
	ctx, cancel := context.WithTimeout(ctx, setupTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "pgbench", "-i", "-q", "-s", "1", "-h", "127.0.0.1", "-p", strconv.Itoa(port), "-U", "postgres", benchDB)
	cmd.Env = append(os.Environ(), "PGSSLMODE="+sslmode, "PGCONNECT_TIMEOUT=10")
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("%v: %s", err, oneLine(lastN(string(out), 300)))
	}
	return nil
}
