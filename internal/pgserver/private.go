package pgserver

import (
	"context"
	"crypto/hmac"
	"crypto/pbkdf2"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/jackc/pgx/v5"
)

// ensurePassword gives the superuser of a Private server the password of
// its password file, making both when there is no file. The file is the
// truth once it exists, so it is written only after the cluster has the
// password: a failure in between leaves no file, and the next start sets a
// new password. A fresh cluster beside an existing file (the data
// directory was removed, the file kept) gets the file's password.
//
// A data directory made by an older version (trust for everyone, no file)
// gets its password here, before its first start with the new pg_hba.conf,
// so it is never open once this version has started it.
func (s *Server) ensurePassword(ctx context.Context, fresh bool) error {
	pw, err := readPassFile(s.pwFile, s.superuser)
	switch {
	case err == nil:
		s.password = pw
		if fresh {
			return s.setPassword(ctx)
		}
		return nil
	case !errors.Is(err, fs.ErrNotExist):
		return err
	}
	// Base32: no ':' or '\', which the .pgpass format would need escaped.
	s.password = rand.Text()
	if err := s.setPassword(ctx); err != nil {
		return err
	}
	if err := writePassFile(s.pwFile, s.superuser, s.password); err != nil {
		return err
	}
	if !fresh {
		s.log.Info("gave the embedded PostgreSQL a new password: its data directory had no password file (versions before this one let every local user in)", "file", s.pwFile)
	}
	return nil
}

// setPassword stores the SCRAM secret of s.password for the superuser, in
// single-user mode: the server is not running, so no connection (and no
// window open to others) is needed. The secret, not the password, is what
// the backend sees, and log_min_error_statement keeps even that out of its
// output.
func (s *Server) setPassword(ctx context.Context) error {
	secret, err := scramSecret(s.password)
	if err != nil {
		return err
	}
	cmd := s.Command(ctx, "postgres", "--single", "-D", s.dataDir,
		"-c", "exit_on_error=on", "-c", "log_min_error_statement=panic",
		"-c", "log_checkpoints=off", "-c", "log_min_messages=warning", "template1")
	cmd.Stdin = strings.NewReader("ALTER ROLE " + pgx.Identifier{s.superuser}.Sanitize() + " PASSWORD '" + secret + "';\n")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("pgserver: setting the superuser's password (postgres --single): %w: %s", err, causeIn(string(out)))
	}
	return nil
}

// scramSecret is PostgreSQL's stored form of a SCRAM-SHA-256 password
// (what password_encryption = scram-sha-256 makes of it); ALTER ROLE stores
// a valid secret as given. SASLprep leaves the ASCII passwords made here as
// they are.
func scramSecret(password string) (string, error) {
	const iterations = 4096
	salt := make([]byte, 16)
	if _, err := rand.Read(salt); err != nil {
		return "", fmt.Errorf("pgserver: salt: %w", err)
	}
	salted, err := pbkdf2.Key(sha256.New, password, salt, iterations, sha256.Size)
	if err != nil {
		return "", fmt.Errorf("pgserver: scram: %w", err)
	}
	mac := func(msg string) []byte {
		h := hmac.New(sha256.New, salted)
		h.Write([]byte(msg))
		return h.Sum(nil)
	}
	stored := sha256.Sum256(mac("Client Key"))
	b64 := base64.StdEncoding.EncodeToString
	return "SCRAM-SHA-256$" + strconv.Itoa(iterations) + ":" + b64(salt) + "$" + b64(stored[:]) + ":" + b64(mac("Server Key")), nil
}

// writePassFile writes one .pgpass line for user on any host, port and
// database, readable by the caller's OS user only, whole or absent
// (replaceFile).
func writePassFile(path, user, password string) error {
	line := fmt.Sprintf("*:*:*:%s:%s\n", passEscape(user), passEscape(password))
	if err := replaceFile(path, []byte(line), -1, -1); err != nil {
		return fmt.Errorf("password file: %w", err)
	}
	return nil
}

// readPassFile returns the password of the first line for user (or any
// user) in a .pgpass file.
// The file is in a directory of the server's OS user: it must be a file of
// the caller's own, not a link, before it is read or its mode set.
func readPassFile(path, user string) (string, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		if errors.Is(err, syscall.ELOOP) {
			return "", fmt.Errorf("pgserver: password file %s is a symbolic link; remove it", path)
		}
		return "", err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return "", fmt.Errorf("pgserver: password file: %w", err)
	}
	if sys, ok := st.Sys().(*syscall.Stat_t); !st.Mode().IsRegular() || !ok || int(sys.Uid) != os.Geteuid() {
		return "", fmt.Errorf("pgserver: password file %s is not a file of uid %d; remove it", path, os.Geteuid())
	}
	// libpq ignores a password file that others may read.
	if err := f.Chmod(0o600); err != nil {
		return "", fmt.Errorf("pgserver: password file: %w", err)
	}
	b, err := io.ReadAll(io.LimitReader(f, 64<<10))
	if err != nil {
		return "", fmt.Errorf("pgserver: password file: %w", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSuffix(line, "\r")
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := passFields(line)
		if len(f) == 5 && (f[3] == user || f[3] == "*") && f[4] != "" {
			return f[4], nil
		}
	}
	return "", fmt.Errorf("pgserver: %s holds no password for %q; remove the file to have a new password set at the next start", path, user)
}

// passEscape escapes ':' and '\' as a .pgpass field needs.
func passEscape(s string) string {
	return strings.NewReplacer(`\`, `\\`, `:`, `\:`).Replace(s)
}

// passFields splits a .pgpass line on unescaped ':'; the last field takes
// the rest of the line.
func passFields(line string) []string {
	var fields []string
	var cur strings.Builder
	for i := 0; i < len(line); i++ {
		switch c := line[i]; {
		case c == '\\' && i+1 < len(line):
			i++
			cur.WriteByte(line[i])
		case c == ':' && len(fields) < 4:
			fields = append(fields, cur.String())
			cur.Reset()
		default:
			cur.WriteByte(c)
		}
	}
	return append(fields, cur.String())
}

// RunningPID is the process id of a live postmaster serving dataDir (by
// the data directory's postmaster.pid, checked against the process); 0 when
// there is none.
func RunningPID(dataDir string) int {
	abs, err := filepath.Abs(dataDir)
	if err != nil {
		return 0
	}
	b, err := os.ReadFile(filepath.Join(abs, "postmaster.pid"))
	if err != nil {
		return 0
	}
	first, _, _ := strings.Cut(string(b), "\n")
	// A single-user backend writes its pid negated: not a postmaster.
	pid, err := strconv.Atoi(strings.TrimSpace(first))
	if err != nil || pid <= 0 || !postmasterOf(pid, abs) {
		return 0
	}
	return pid
}

// stopLeftover stops a postmaster of the data directory left by an earlier
// run: one that outlived a proxy killed with SIGKILL (an older version's
// server was detached from the proxy; this version's shuts down when the
// proxy dies, but may still be shutting down when the next one starts).
func (s *Server) stopLeftover(ctx context.Context) error {
	pid := RunningPID(s.dataDir)
	if pid == 0 {
		return nil
	}
	out, err := s.Command(ctx, "pg_ctl", "-D", s.dataDir, "-m", "fast", "-w", "-t", "30", "stop").CombinedOutput()
	if err != nil {
		return fmt.Errorf("pgserver: a PostgreSQL of an earlier run (pid %d) still serves %s and did not stop: %w: %s", pid, s.dataDir, err, short(lastLines(out, 2)))
	}
	s.log.Info("stopped a leftover embedded PostgreSQL from an earlier run", "pid", pid, "dir", s.dataDir)
	return nil
}
