package pgserver_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/snowflake-proxy/snowflake-proxy/internal/pgserver"
)

// The embedded default on a machine without a postgres user, run as root
// (a fresh container): the server's OS user is created, once, and the
// server runs as it. Not as root, creating a user fails and says so.
// Regression: the proxy stopped with "user \"postgres\" does not exist".
func TestStartCreatesRunAs(t *testing.T) {
	name := fmt.Sprintf("sfp-test-%d", os.Getpid())
	if os.Geteuid() != 0 {
		if _, err := pgserver.EnsureSystemUser(context.Background(), name); err == nil || !strings.Contains(err.Error(), "useradd") {
			t.Fatalf("not root: EnsureSystemUser gave %v, want useradd's refusal", err)
		}
		return
	}
	if _, err := user.Lookup(name); err == nil {
		t.Fatalf("user %s exists before the test", name)
	}
	t.Cleanup(func() { _ = exec.Command("userdel", name).Run() })
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	srv, err := pgserver.Start(ctx, pgserver.Options{RunAs: name, CreateRunAs: true, Settings: map[string]string{"fsync": "off"}})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop(ctx)
	c, err := pgx.Connect(ctx, srv.URL("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	var dir string
	if err := c.QueryRow(ctx, "SHOW data_directory").Scan(&dir); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	u, err := user.Lookup(name)
	if err != nil {
		t.Fatal(err)
	}
	if owner := fmt.Sprint(fi.Sys().(*syscall.Stat_t).Uid); owner != u.Uid {
		t.Fatalf("data directory owned by uid %s, want %s (%s)", owner, u.Uid, name)
	}
	if created, err := pgserver.EnsureSystemUser(ctx, name); created || err != nil {
		t.Fatalf("second EnsureSystemUser: created %v, %v", created, err)
	}
}
