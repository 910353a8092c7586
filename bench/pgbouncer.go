package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// aptTimeout bounds apt-get update + install of PgBouncer.
const aptTimeout = 5 * time.Minute

// pgbouncerConfig is the ini the harness writes: session pooling, trust
// auth, a pool large enough that 8 clients never wait, the server reached
// as the proxy reaches it (pgbouncerUpstream: its Unix socket, or TCP with
// or without TLS), clients taken as the proxy takes them
// (pgbouncerClientTLS: with TLS required, or without TLS).
const pgbouncerConfig = `[databases]
%[1]s = host=%[2]s port=%[3]d dbname=%[1]s

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = %[4]d
unix_socket_dir = %[5]s
auth_type = trust
auth_file = %[5]s/userlist.txt
pool_mode = session
max_client_conn = 100
default_pool_size = 20
log_connections = 0
log_disconnections = 0
log_pooler_errors = 1
server_tls_sslmode = %[6]s
%[7]s`

// pgbouncerINI is the configuration of a PgBouncer listening on port with
// its files in pbDir, in front of the server on sockDir and pgPort as k
// says, serving clients with TLS when ct is not nil.
func pgbouncerINI(k upstreamKind, ct *relayCert, sockDir string, pgPort, port int, pbDir string) string {
	host, sslmode := pgbouncerUpstream(k, sockDir)
	return fmt.Sprintf(pgbouncerConfig, benchDB, host, pgPort, port, pbDir, sslmode, pgbouncerClientTLS(ct))
}

// findPgBouncer returns the pgbouncer binary, installing the Debian package
// when it is missing and we are root.
func findPgBouncer(ctx context.Context) (string, error) {
	for _, p := range []string{"/usr/sbin/pgbouncer", "/usr/bin/pgbouncer"} {
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	if p, err := exec.LookPath("pgbouncer"); err == nil {
		return p, nil
	}
	if os.Geteuid() != 0 {
		return "", fmt.Errorf("pgbouncer not installed and not root to apt-get install it")
	}
	fmt.Println("bench: pgbouncer missing, running apt-get install -y pgbouncer")
	ctx, cancel := context.WithTimeout(ctx, aptTimeout)
	defer cancel()
	for _, args := range [][]string{{"update"}, {"install", "-y", "pgbouncer"}} {
		cmd := exec.CommandContext(ctx, "apt-get", args...)
		cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
		if out, err := cmd.CombinedOutput(); err != nil {
			return "", fmt.Errorf("apt-get %s: %v: %s", args[0], err, oneLine(lastN(string(out), 200)))
		}
	}
	if _, err := os.Stat("/usr/sbin/pgbouncer"); err != nil {
		return "", fmt.Errorf("apt-get install pgbouncer succeeded but /usr/sbin/pgbouncer is missing")
	}
	return "/usr/sbin/pgbouncer", nil
}

// startPgBouncer writes its configuration under dir/pgbouncer and runs it
// (as the postgres user when root: PgBouncer refuses to run as root).
func startPgBouncer(ctx context.Context, bin, dir string, k upstreamKind, ct *relayCert, sockDir string, pgPort int) (*proc, int, error) {
	cred, uid, gid, err := unprivileged()
	if err != nil {
		return nil, 0, err
	}
	pbDir := filepath.Join(dir, "pgbouncer")
	if err := os.MkdirAll(pbDir, 0o755); err != nil {
		return nil, 0, err
	}
	port, err := freePort()
	if err != nil {
		return nil, 0, err
	}
	files := map[string]string{
		"pgbouncer.ini": pgbouncerINI(k, ct, sockDir, pgPort, port, pbDir),
		"userlist.txt":  `"postgres" ""` + "\n",
	}
	for name, content := range files {
		p := filepath.Join(pbDir, name)
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			return nil, 0, err
		}
	}
	if uid >= 0 {
		for _, p := range []string{pbDir, filepath.Join(pbDir, "pgbouncer.ini"), filepath.Join(pbDir, "userlist.txt")} {
			if err := os.Chown(p, uid, gid); err != nil {
				return nil, 0, fmt.Errorf("chown %s: %w", p, err)
			}
		}
	}
	p, err := startAccepting(ctx, "pgbouncer", filepath.Join(pbDir, "pgbouncer.log"), cred, port, bin, filepath.Join(pbDir, "pgbouncer.ini"))
	if err != nil {
		return nil, 0, err
	}
	return p, port, nil
}

// pgbouncerVersion is the first line of `pgbouncer --version`.
func pgbouncerVersion(bin string) string {
	out, err := exec.Command(bin, "--version").Output()
	if err != nil {
		return "unknown"
	}
	return strings.SplitN(strings.TrimSpace(string(out)), "\n", 2)[0]
}
