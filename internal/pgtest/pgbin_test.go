package pgtest

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/snowflake-proxy/snowflake-proxy/internal/pgserver"
)

// serverVersionNum asks srv for server_version_num.
func serverVersionNum(t *testing.T, srv *pgserver.Server) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := pgx.Connect(ctx, srv.URL("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	var v string
	if err := c.QueryRow(ctx, "SHOW server_version_num").Scan(&v); err != nil {
		t.Fatal(err)
	}
	return v
}

// TestEnvBinDirStartsEveryServer: with SNOWFLAKE_PROXY_TEST_PGBIN naming
// installed PostgreSQL 18 binaries, Start (and Shared, through
// DefaultBinDir) runs PostgreSQL 18, whatever the machine has.
func TestEnvBinDirStartsEveryServer(t *testing.T) {
	bin := BinDir(t, 18)
	t.Setenv(EnvBinDir, bin)
	if d, err := DefaultBinDir(); err != nil || d != bin {
		t.Fatalf("DefaultBinDir() = %q, %v; want %q", d, err, bin)
	}
	srv := Start(t, pgserver.Options{})
	if srv.BinDir() != bin {
		t.Errorf("server started from %s, want %s", srv.BinDir(), bin)
	}
	if v := serverVersionNum(t, srv); !strings.HasPrefix(v, "18") {
		t.Errorf("server_version_num = %s, want 18xxxx", v)
	}
}

// TestEnvBinDirWithoutBinaries: a setting that names a directory without
// the server binaries is an error naming the setting, not a silent fall
// back to the machine's binaries.
func TestEnvBinDirWithoutBinaries(t *testing.T) {
	t.Setenv(EnvBinDir, t.TempDir())
	_, err := DefaultBinDir()
	if err == nil || !strings.Contains(err.Error(), EnvBinDir) {
		t.Fatalf("DefaultBinDir() with an empty directory: %v; want an error naming %s", err, EnvBinDir)
	}
}

// TestInstallMajorUnknownVersion: a major version with no pinned release
// is an error, not ErrUnavailable (the test asking for it would be skipped).
func TestInstallMajorUnknownVersion(t *testing.T) {
	_, err := InstallMajor(context.Background(), 9)
	if err == nil || errors.Is(err, ErrUnavailable) {
		t.Fatalf("installing PostgreSQL 9: %v; want an error other than ErrUnavailable", err)
	}
}
