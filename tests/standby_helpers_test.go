package tests

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/snowflake-proxy/snowflake-proxy/internal/pgserver"
	"github.com/snowflake-proxy/snowflake-proxy/internal/pgtest"
)

// standbyPair is a primary and a hot standby streaming from it, both
// private servers stopped at the end of the test, with one database (db)
// created on the primary before the base backup.
type standbyPair struct {
	primary *pgserver.Server
	standby *pgserver.Server
	db      string
}

// startStandbyPair starts a primary that allows replication, takes a base
// backup of it (baseBackup) and starts that copy as a hot standby.
func startStandbyPair(t *testing.T) *standbyPair {
	t.Helper()
	hba := []string{
		"local all all trust",
		"host all all 127.0.0.1/32 trust",
		"local replication all trust",
		"host replication all 127.0.0.1/32 trust",
	}
	primary := pgtest.Start(t, pgserver.Options{
		HBA: hba,
		Settings: map[string]string{
			"wal_level":          "replica",
			"max_wal_senders":    "5",
			"hot_standby":        "on",
			"full_page_writes":   "on", // pgtest turns it off; keep backups sane
			"wal_sender_timeout": "'10s'",
		},
	})
	p := &standbyPair{primary: primary, db: "standbydb"}
	pgtest.Exec(t, primary, "postgres", "CREATE DATABASE "+p.db)

	// A directory the server's OS user owns (t.TempDir is root-only).
	root, err := os.MkdirTemp("", "sfstandby-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(root) })
	if err := primary.Own(root); err != nil {
		t.Fatal(err)
	}
	dataDir := filepath.Join(root, "data")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	baseBackup(t, ctx, primary, dataDir)
	// pgserver reuses an existing cluster: it rewrites its own conf include
	// and pg_hba.conf (new port and socket directory) and keeps
	// standby.signal, primary_conninfo and primary_slot_name from
	// postgresql.auto.conf.
	standby, err := pgserver.Start(ctx, pgserver.Options{
		BinDir:  primary.BinDir(),
		DataDir: dataDir,
		HBA:     hba,
		Settings: map[string]string{
			"hot_standby":        "on",
			"fsync":              "off",
			"synchronous_commit": "off",
			// At least the primary's (pgtest's test settings).
			"max_prepared_transactions": "8",
		},
	})
	if err != nil {
		t.Fatalf("starting the standby: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		if err := standby.Stop(ctx); err != nil {
			t.Errorf("stopping the standby: %v", err)
		}
	})
	p.standby = standby

	// It really is a standby.
	c := connectURL(t, standby.URL(p.db))
	var inRecovery bool
	if err := c.QueryRow(ctx, "SELECT pg_is_in_recovery()").Scan(&inRecovery); err != nil {
		t.Fatalf("standby: pg_is_in_recovery(): %v", err)
	}
	if !inRecovery {
		t.Fatal("the standby is not in recovery: it is not a standby")
	}
	_ = c.Close(ctx)
	return p
}

// baseBackup copies primary's data directory into dataDir as a standby of
// it, as pg_basebackup -R does, with the low-level backup functions and a
// copy of the files: the binaries installed from npm (pgtest.InstallMajor)
// have no pg_basebackup, and one of another major version refuses the
// server. A physical replication slot, made before the backup starts,
// keeps the WAL the standby needs until it streams from the primary.
func baseBackup(t *testing.T, ctx context.Context, primary *pgserver.Server, dataDir string) {
	t.Helper()
	c := connectURL(t, primary.URL("postgres"))
	defer c.Close(ctx)
	var num int
	if err := c.QueryRow(ctx, "SELECT current_setting('server_version_num')::int").Scan(&num); err != nil {
		t.Fatal(err)
	}
	start, stop := "SELECT pg_backup_start('standby', true)", "SELECT labelfile FROM pg_backup_stop(false)"
	if num < 150000 {
		start, stop = "SELECT pg_start_backup('standby', true, false)", "SELECT labelfile FROM pg_stop_backup(false, false)"
	}
	for _, sql := range []string{"SELECT pg_create_physical_replication_slot('standby', true)", start} {
		if _, err := c.Exec(ctx, sql); err != nil {
			t.Fatalf("primary: %s: %v", sql, err)
		}
	}
	if err := copyDataDir(primary, primary.DataDir(), dataDir); err != nil {
		t.Fatalf("copying the primary's data directory: %v", err)
	}
	var label string
	if err := c.QueryRow(ctx, stop).Scan(&label); err != nil {
		t.Fatalf("primary: %s: %v", stop, err)
	}
	conninfo := fmt.Sprintf("host=127.0.0.1 port=%d user=%s", primary.Port(), primary.Superuser())
	auto, err := os.ReadFile(filepath.Join(dataDir, "postgresql.auto.conf"))
	if err != nil {
		t.Fatal(err)
	}
	auto = fmt.Appendf(auto, "primary_conninfo = '%s'\nprimary_slot_name = 'standby'\n", conninfo)
	for name, content := range map[string][]byte{
		"backup_label":         []byte(label),
		"standby.signal":       nil,
		"postgresql.auto.conf": auto,
	} {
		path := filepath.Join(dataDir, name)
		if err := os.WriteFile(path, content, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := primary.Own(path); err != nil {
			t.Fatal(err)
		}
	}
}

// backupSkipsContents are the directories of a data directory whose
// contents a base backup leaves out, as pg_basebackup does: WAL (streamed
// instead; its subdirectories are kept), replication slots, and state that
// a starting server makes afresh.
var backupSkipsContents = map[string]bool{
	"pg_wal": true, "pg_replslot": true, "pg_dynshmem": true, "pg_notify": true,
	"pg_serial": true, "pg_snapshots": true, "pg_stat_tmp": true, "pg_subtrans": true,
}

// copyDataDir copies the data directory src, which its server is writing,
// into dst (new), with the files' modes, owned by srv's OS user. Files that
// go away during the copy are skipped (the backup's WAL covers them).
func copyDataDir(srv *pgserver.Server, src, dst string) error {
	return filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		target := filepath.Join(dst, rel)
		info, err := d.Info()
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		top := strings.SplitN(rel, string(filepath.Separator), 2)[0]
		switch {
		case d.IsDir() && top != rel && top != "pg_wal" && backupSkipsContents[top]:
			return filepath.SkipDir
		case d.IsDir():
			if err := os.Mkdir(target, info.Mode().Perm()); err != nil {
				return err
			}
			return srv.Own(target)
		case !info.Mode().IsRegular():
			return fmt.Errorf("%s: not a regular file or directory", path)
		case backupSkipsContents[top], rel == "postmaster.pid", rel == "postmaster.opts", d.Name() == "pg_internal.init":
			return nil
		}
		in, err := os.Open(path)
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		defer in.Close()
		out, err := os.OpenFile(target, os.O_WRONLY|os.O_CREATE|os.O_EXCL, info.Mode().Perm())
		if err != nil {
			return err
		}
		if _, err := io.Copy(out, in); err != nil {
			out.Close()
			return err
		}
		if err := out.Close(); err != nil {
			return err
		}
		return srv.Own(target)
	})
}

// connectURL opens a pgx connection (default exec mode), closed at the end
// of the test.
func connectURL(t *testing.T, url string) *pgx.Conn {
	t.Helper()
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	return connectConfig(t, cfg)
}

// waitReplayed waits until the standby has replayed everything the primary
// has committed so far (polling, bounded by a deadline). The target is the
// WAL insert position, not pg_current_wal_lsn (what was written out): the
// test servers commit with synchronous_commit off, so a commit can sit in
// the WAL buffers until the WAL writer flushes it, and a primary crashed
// then loses it (regression: a CI run of
// TestFailoverProxyFollowsPromotedStandby found 55 distinct items on the
// promoted server, want 75: 20, as many as the INSERT ... SELECT made just
// before the crash).
func (p *standbyPair) waitReplayed(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	pc := connectURL(t, p.primary.URL(p.db))
	var lsn string
	if err := pc.QueryRow(ctx, "SELECT pg_current_wal_insert_lsn()::text").Scan(&lsn); err != nil {
		t.Fatalf("primary: pg_current_wal_insert_lsn(): %v", err)
	}
	_ = pc.Close(ctx)
	sc := connectURL(t, p.standby.URL(p.db))
	defer sc.Close(context.Background())
	var last string
	for {
		var done bool
		var replay *string
		err := sc.QueryRow(ctx, "SELECT pg_last_wal_replay_lsn()::text, coalesce(pg_last_wal_replay_lsn() >= $1::pg_lsn, false)", lsn).Scan(&replay, &done)
		if err != nil {
			t.Fatalf("standby has not replayed up to %s (last replayed %s): %v", lsn, last, err)
		}
		if replay != nil {
			last = *replay
		}
		if done {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("standby has not replayed up to %s within the deadline (last replayed %s)", lsn, last)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// proxyGoroutine matches the code of the proxy (and the pools its services
// open) in a goroutine's frames.
var proxyGoroutine = regexp.MustCompile(`snowflake-proxy/(wire|compat|generator|rewrite|internal/app)\.|jackc/pgx/v5/pgxpool\.`)

var goroutineHeader = regexp.MustCompile(`^goroutine (\d+) `)

// proxyGoroutines returns the goroutines running proxy code, by id.
func proxyGoroutines() map[string]string {
	buf := make([]byte, 4<<20)
	buf = buf[:runtime.Stack(buf, true)]
	out := map[string]string{}
	for _, g := range strings.Split(string(buf), "\n\n") {
		m := goroutineHeader.FindStringSubmatch(g)
		if m == nil {
			continue
		}
		// The frames only: a goroutine that has returned but not yet
		// exited still names its creator.
		frames := g
		if i := strings.Index(g, "\ncreated by "); i >= 0 {
			frames = g[:i]
		}
		if proxyGoroutine.MatchString(frames) && !strings.Contains(frames, "tests.Test") {
			out[m[1]] = g
		}
	}
	return out
}

// waitNoNewProxyGoroutines polls until no proxy goroutine outside baseline
// remains, and fails listing them after the deadline.
func waitNoNewProxyGoroutines(t *testing.T, baseline map[string]string, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		var left []string
		for id, g := range proxyGoroutines() {
			if _, ok := baseline[id]; !ok {
				left = append(left, g)
			}
		}
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d proxy goroutines left after Close:\n%s", len(left), strings.Join(left, "\n\n"))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// describeErr renders an error with its SQLSTATE for failure messages.
func describeErr(err error) string {
	if err == nil {
		return "no error"
	}
	return fmt.Sprintf("%v (SQLSTATE %q)", err, sqlState(err))
}
