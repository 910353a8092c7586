package pgserver

import (
	"context"
	"fmt"
	"os/exec"
	"os/user"
	"strings"
	"sync"
	"time"
)

// userMu serialises EnsureSystemUser within the process; useradd itself
// locks the user database against other processes.
var userMu sync.Mutex

// EnsureSystemUser creates name as a system user, as the distributions'
// PostgreSQL packages create postgres (useradd --system, home
// /var/lib/postgresql), when it does not exist. It reports whether it
// created it. Only root may; PostgreSQL refuses to run as root, so a
// caller that is root needs such a user to run the server as.
func EnsureSystemUser(ctx context.Context, name string) (created bool, err error) {
	userMu.Lock()
	defer userMu.Unlock()
	if _, err := user.Lookup(name); err == nil {
		return false, nil
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "useradd", "--system", "--home-dir", "/var/lib/postgresql",
		"--shell", "/bin/bash", name).CombinedOutput()
	if _, lerr := user.Lookup(name); lerr == nil {
		return err == nil, nil // made now, or by another process meanwhile
	}
	if err == nil {
		err = fmt.Errorf("no user %q afterwards", name)
	}
	return false, fmt.Errorf("pgserver: useradd %s: %w: %s", name, err, strings.TrimSpace(string(out)))
}
