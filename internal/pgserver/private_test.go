//go:build linux

package pgserver_test

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"os/user"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/snowflake-proxy/snowflake-proxy/internal/pgserver"
	"github.com/snowflake-proxy/snowflake-proxy/internal/pgtest"
)

var fastSettings = map[string]string{"fsync": "off", "synchronous_commit": "off"}

// dataDir is a data directory path in a new temporary directory that the
// server's OS user (postgres, when the tests run as root) may enter.
func dataDir(t *testing.T) string {
	t.Helper()
	d := t.TempDir()
	for _, p := range []string{filepath.Dir(d), d} {
		if err := os.Chmod(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return filepath.Join(d, "data")
}

// socketDSN is a connection string to a server's socket for the superuser,
// with extra key=value settings (passfile=...).
func socketDSN(srv *pgserver.Server, extra string) string {
	return "host=" + srv.SocketDir() + " port=" + strconv.Itoa(srv.Port()) +
		" user=postgres dbname=postgres sslmode=disable connect_timeout=10 " + extra
}

// wantPasswordRefused connects without a password (and with no password
// file: passfile points at nothing) and wants the server's refusal.
func wantPasswordRefused(t *testing.T, ctx context.Context, dsn string) {
	t.Helper()
	c, err := pgx.Connect(ctx, dsn+" passfile="+filepath.Join(t.TempDir(), "none"))
	if err == nil {
		c.Close(ctx)
		t.Fatal("connected without the password")
	}
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Code != "28P01" {
		t.Fatalf("without the password: %v, want SQLSTATE 28P01 (password authentication failed)", err)
	}
}

// checkPrivateServer asserts what every Private server promises: the
// password file (0600, ours, one .pgpass line) lets the superuser in, no
// connection without it, the socket directory is the server user's alone,
// the superuser's password is stored as a SCRAM secret and pg_hba.conf
// allows nothing else.
func checkPrivateServer(t *testing.T, ctx context.Context, srv *pgserver.Server) {
	t.Helper()
	if srv.Addr() != "" {
		t.Errorf("Addr() = %q, want empty (no TCP)", srv.Addr())
	}
	pf := srv.PasswordFile()
	st, err := os.Stat(pf)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 || int(st.Sys().(*syscall.Stat_t).Uid) != os.Geteuid() {
		t.Errorf("password file %s: mode %v uid %d, want 0600 owned by uid %d", pf, st.Mode().Perm(), st.Sys().(*syscall.Stat_t).Uid, os.Geteuid())
	}
	b, err := os.ReadFile(pf)
	if err != nil {
		t.Fatal(err)
	}
	if line := strings.TrimSpace(string(b)); !strings.HasPrefix(line, "*:*:*:postgres:") || len(line) < len("*:*:*:postgres:")+20 || strings.Count(line, "\n") != 0 {
		t.Errorf("password file holds %d bytes, want one line *:*:*:postgres:<password of 20+ chars>", len(b))
	}

	sock, err := os.Stat(srv.SocketDir())
	if err != nil {
		t.Fatal(err)
	}
	wantUID := os.Geteuid()
	if wantUID == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			t.Fatal(err)
		}
		wantUID, _ = strconv.Atoi(u.Uid)
	}
	if sock.Mode().Perm() != 0o700 || int(sock.Sys().(*syscall.Stat_t).Uid) != wantUID {
		t.Errorf("socket directory: mode %v uid %d, want 0700 owned by the server's uid %d", sock.Mode().Perm(), sock.Sys().(*syscall.Stat_t).Uid, wantUID)
	}

	wantPasswordRefused(t, ctx, socketDSN(srv, ""))
	c, err := pgx.Connect(ctx, socketDSN(srv, "passfile="+pf))
	if err != nil {
		t.Fatalf("with the password file: %v", err)
	}
	defer c.Close(ctx)
	var listen, enc string
	var scram bool
	if err := c.QueryRow(ctx, `SELECT current_setting('listen_addresses'), current_setting('password_encryption'),
		rolpassword LIKE 'SCRAM-SHA-256$4096:%' FROM pg_authid WHERE rolname = 'postgres'`).Scan(&listen, &enc, &scram); err != nil {
		t.Fatal(err)
	}
	if listen != "" || enc != "scram-sha-256" || !scram {
		t.Errorf("listen_addresses %q, password_encryption %q, SCRAM secret stored %v; want '', scram-sha-256, true", listen, enc, scram)
	}
	// The URL the proxy's control connections use works as well.
	c2, err := pgx.Connect(ctx, srv.URL("postgres"))
	if err != nil {
		t.Fatalf("srv.URL: %v", err)
	}
	c2.Close(ctx)
	hba, err := os.ReadFile(filepath.Join(srv.DataDir(), "pg_hba.conf"))
	if err != nil {
		t.Fatal(err)
	}
	if string(hba) != "local all all scram-sha-256\n" {
		t.Errorf("pg_hba.conf = %q", hba)
	}
}

// A Private server (the proxy's embedded one) admits only the holder of
// its password file, through a socket directory of its own, with no TCP
// listener; its postmaster is in a process group of its own, so that a
// terminal's Ctrl-C reaches the proxy, not the server. It keeps its
// password across a restart, and gets a new one when the password file is
// removed.
func TestPrivateServer(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	dir := dataDir(t)
	srv, err := pgserver.Start(ctx, pgserver.Options{DataDir: dir, Private: true, Settings: fastSettings})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop(ctx)
	checkPrivateServer(t, ctx, srv)
	pid := srv.PID()
	if pid == 0 || pgserver.RunningPID(dir) != pid {
		t.Fatalf("PID() %d, RunningPID %d: want the same live postmaster", pid, pgserver.RunningPID(dir))
	}
	checkNoTCP(t, pid, srv.SocketPath())
	if pgid, err := syscall.Getpgid(pid); err != nil || pgid != pid {
		t.Errorf("postmaster's process group %d (%v), want its own (%d)", pgid, err, pid)
	}
	before, _ := os.ReadFile(srv.PasswordFile())

	if err := srv.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	if pgserver.RunningPID(dir) != srv.PID() || srv.PID() == pid {
		t.Fatalf("after Restart: PID() %d, RunningPID %d, old %d", srv.PID(), pgserver.RunningPID(dir), pid)
	}
	if err := srv.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if pgserver.RunningPID(dir) != 0 {
		t.Fatal("a postmaster still runs after Stop")
	}

	// Started again on the same data directory: same password, no new one.
	srv, err = pgserver.Start(ctx, pgserver.Options{DataDir: dir, Private: true, Settings: fastSettings})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop(ctx)
	after, _ := os.ReadFile(srv.PasswordFile())
	if string(before) != string(after) {
		t.Error("the password file changed across a restart")
	}
	checkPrivateServer(t, ctx, srv)

	// Removing the password file is how to have a new password set.
	if err := srv.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(srv.PasswordFile(), srv.PasswordFile()+".old"); err != nil {
		t.Fatal(err)
	}
	var logs pgtest.SyncBuffer
	srv, err = pgserver.Start(ctx, pgserver.Options{DataDir: dir, Private: true, Settings: fastSettings,
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop(ctx)
	checkPrivateServer(t, ctx, srv)
	if n := strings.Count(logs.String(), "gave the embedded PostgreSQL a new password"); n != 1 {
		t.Errorf("%d lines about the new password, want 1:\n%s", n, logs.String())
	}
	if c, err := pgx.Connect(ctx, socketDSN(srv, "passfile="+srv.PasswordFile()+".old")); err == nil {
		c.Close(ctx)
		t.Fatal("the old password still works")
	}
}

// A data directory made by an earlier version (trust for every local and
// loopback connection, no password) is migrated on its first Private
// start: the superuser gets a password, pg_hba.conf wants it, and TCP is
// gone. This is what left upgrading users open.
func TestPrivateMigratesTrustDataDir(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	dir := dataDir(t)
	old, err := pgserver.Start(ctx, pgserver.Options{DataDir: dir, Settings: fastSettings})
	if err != nil {
		t.Fatal(err)
	}
	// The old setup, for the record: anyone in over TCP, no password.
	c, err := pgx.Connect(ctx, "postgres://postgres@"+old.Addr()+"/postgres?sslmode=disable")
	if err != nil {
		old.Stop(ctx)
		t.Fatalf("the trust setup should let anyone in: %v", err)
	}
	c.Close(ctx)
	// Control for checkNoTCP: it sees the old server's listener.
	if len(tcpListeners(t, pgserver.RunningPID(dir))) == 0 {
		old.Stop(ctx)
		t.Fatal("checkNoTCP's scan finds no TCP listener of a server that has one")
	}
	if err := old.Stop(ctx); err != nil {
		t.Fatal(err)
	}

	var logs pgtest.SyncBuffer
	srv, err := pgserver.Start(ctx, pgserver.Options{DataDir: dir, Private: true, Settings: fastSettings,
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop(ctx)
	checkPrivateServer(t, ctx, srv)
	checkNoTCP(t, srv.PID(), srv.SocketPath())
	if n := strings.Count(logs.String(), "gave the embedded PostgreSQL a new password"); n != 1 {
		t.Errorf("%d lines about the new password, want 1:\n%s", n, logs.String())
	}
	if strings.Contains(logs.String(), "leftover") {
		t.Errorf("a stopped server reported as a leftover:\n%s", logs.String())
	}
	if strings.Contains(logs.String(), strings.TrimPrefix(strings.TrimSpace(readFile(t, srv.PasswordFile())), "*:*:*:postgres:")) {
		t.Error("the password is in the log")
	}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// When the server cannot start, the error is one short line naming the
// cause and the log file. A leftover postmaster once made the next start
// fail with the tails of pg_ctl's output and of the log on one line of
// about 1,000 characters, with no hint.
func TestStartFailureIsOneLine(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	dir := dataDir(t)
	for _, c := range []struct {
		name    string
		private bool
	}{{"pg_ctl", false}, {"private", true}} {
		t.Run(c.name, func(t *testing.T) {
			// The postmaster refuses this at start; initdb and single-user
			// mode do not check it.
			srv, err := pgserver.Start(ctx, pgserver.Options{DataDir: dir, Private: c.private,
				Settings: map[string]string{"max_connections": "1"}})
			if err == nil {
				srv.Stop(ctx)
				t.Fatal("started with max_connections = 1")
			}
			msg := err.Error()
			logFile := filepath.Join(filepath.Dir(dir), "server.log")
			// PostgreSQL 18 quotes the settings' names ("max_connections" (1)).
			if strings.Contains(msg, "\n") || len(msg) > 400 || !regexp.MustCompile(`must be less than "?max_connections`).MatchString(msg) ||
				!strings.HasSuffix(msg, "server log: "+logFile) {
				t.Fatalf("error (%d chars) %q: want one line under 400 chars with the cause and the log file", len(msg), msg)
			}
			if pgserver.RunningPID(dir) != 0 {
				t.Fatal("a postmaster runs after a failed start")
			}
		})
	}
}
