package pgserver

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// initdb creates the cluster. Its trust lines in pg_hba.conf never serve a
// Private server: writeConf replaces them before the first start.
func (s *Server) initdb(ctx context.Context, o Options) error {
	args := []string{"-D", s.dataDir, "-U", o.Superuser, "-E", "UTF8", "--locale=C", "--auth=trust", "--no-sync"}
	if o.Password != "" {
		pw := filepath.Join(filepath.Dir(s.dataDir), "pwfile")
		if err := os.WriteFile(pw, []byte(o.Password+"\n"), 0o600); err != nil {
			return fmt.Errorf("pgserver: %w", err)
		}
		defer os.Remove(pw)
		_ = s.Own(pw)
		args = append(args, "--pwfile="+pw)
	}
	s.log.Info("initdb", "dir", s.dataDir)
	if out, err := s.Command(ctx, "initdb", args...).CombinedOutput(); err != nil {
		return fmt.Errorf("pgserver: initdb: %w: %s", err, lastLines(out, 5))
	}
	return nil
}

// writeConf (re)writes the settings the proxy relies on into an included
// file, so a reused data directory picks up the current options.
func (s *Server) writeConf(o Options, uid, gid int) error {
	listen := "'127.0.0.1'"
	if s.private {
		listen = "''"
	}
	conf := []string{
		"listen_addresses = " + listen,
		"unix_socket_directories = '" + s.sockDir + "'",
		"max_connections = 300",
		"shared_buffers = 128MB",
		"fsync = on",
		"logging_collector = off",
		"log_min_messages = warning",
		"track_functions = 'pl'",
	}
	if s.private {
		// The directory already keeps others out; the socket's own mode
		// says the same to anyone who looks at it.
		conf = append(conf, "unix_socket_permissions = 0700", "password_encryption = 'scram-sha-256'")
	}
	keys := make([]string, 0, len(o.Settings))
	for k := range o.Settings {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		conf = append(conf, k+" = "+o.Settings[k])
	}
	files := map[string]string{
		"snowflake_proxy.conf": strings.Join(conf, "\n") + "\n",
	}
	main := filepath.Join(s.dataDir, "postgresql.conf")
	b, err := os.ReadFile(main)
	if err != nil {
		return fmt.Errorf("pgserver: %w", err)
	}
	if !strings.Contains(string(b), "include_if_exists = 'snowflake_proxy.conf'") {
		b = append(b, "\ninclude_if_exists = 'snowflake_proxy.conf'\n"...)
		files["postgresql.conf"] = string(b)
	}
	hba := o.HBA
	switch {
	case s.private:
		// Every connection needs the password, the proxy's relayed
		// sessions included: the proxy's listener must not make anyone
		// on the machine a superuser.
		hba = []string{"local all all scram-sha-256"}
	case len(hba) == 0:
		hba = []string{"local all all trust", "host all all 127.0.0.1/32 trust", "host all all ::1/128 trust"}
	}
	files["pg_hba.conf"] = strings.Join(hba, "\n") + "\n"
	for name, content := range files {
		if err := replaceFile(filepath.Join(s.dataDir, name), []byte(content), uid, gid); err != nil {
			return err
		}
	}
	return nil
}

// replaceFile writes a new file at path, given to uid:gid when uid >= 0,
// and synced to disk. The data directory belongs to the server's OS user
// while the caller may be root: writing through a name there could follow
// a link that user left to any file; a new file (O_EXCL) renamed over the
// name replaces the link, and the file is whole or absent.
func replaceFile(path string, content []byte, uid, gid int) error {
	tmp := path + ".new"
	_ = os.Remove(tmp)
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("pgserver: %w", err)
	}
	_, err = f.Write(content)
	if err == nil && uid >= 0 {
		err = f.Chown(uid, gid)
	}
	if err == nil {
		err = f.Sync()
	}
	if e := f.Close(); err == nil {
		err = e
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("pgserver: %w", err)
	}
	return nil
}
