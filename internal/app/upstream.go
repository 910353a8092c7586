package app

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/snowflake-proxy/snowflake-proxy/wire"
)

// upstream is where client sessions and control connections go. Both are
// derived from one parse of the operator's connection string, so they
// agree on the server and on TLS.
type upstream struct {
	wire wire.Upstream
	// controlURL is the connection string of the proxy's own connections,
	// password included: never log it.
	controlURL string
	// display is the connection string for logs and the ready line, its
	// password masked.
	display string
	// user and database are the connection string's, for the ready line.
	user, database string
}

// parseUpstream accepts what libpq accepts for a single server (a
// postgres:// URL or a key=value string) and two shorthands: host:port,
// and a Unix-socket directory (optionally "dir:port"). Settings missing
// from it come from libpq's environment variables (PGSSLMODE,
// PGSSLROOTCERT, PGPASSWORD, PGPASSFILE, ...) and libpq's defaults
// (sslmode=prefer). User and password are the control credentials;
// passwordFile, when set and no password was given otherwise, holds the
// password.
func parseUpstream(s, passwordFile string) (upstream, error) {
	up, err := parseUpstreamFlag("--upstream", s, passwordFile)
	if err == nil && up.wire.ChannelBindingRequired && up.wire.SSLMode != "verify-full" && up.wire.SSLMode != "verify-ca" {
		// The sessions relay each client's own SCRAM, which the client
		// cannot bind to the proxy's TLS connection to the server: only
		// the server's certificate can prove the server to them.
		return upstream{}, errors.New("invalid --upstream: channel_binding=require needs sslmode=verify-full or verify-ca: the proxy relays each client's own authentication, which cannot be bound to the proxy's TLS connection to the server, so the server's certificate must prove the server to the sessions (the proxy's own connections use channel binding as asked)")
	}
	return up, err
}

// parseUpstreamFlag is parseUpstream for the setting named flag
// (--upstream, --control-upstream), which its errors name.
func parseUpstreamFlag(flag, s, passwordFile string) (upstream, error) {
	cs, err := connString(flag, s)
	if err != nil {
		return upstream{}, err
	}
	cfg, err := pgconn.ParseConfig(cs)
	if err != nil {
		return upstream{}, maskedError{"invalid " + flag, err}
	}
	if mode, _, name := tlsModeOf(cfg); mode == wire.TLSRequire && cfg.TLSConfig.RootCAs == nil {
		// libpq's default root certificate file: with it, require
		// verifies the chain (verify-ca); without it, verify-ca and
		// verify-full cannot work.
		root := defaultRootCert()
		if root == "" && name != "require" {
			return upstream{}, errors.New("invalid " + flag + ": sslmode=" + name +
				" needs the server's root certificate: add sslrootcert=<file> (your provider's CA bundle) or sslrootcert=system (the system's trusted roots), or choose an sslmode that does not verify the server")
		}
		if root != "" {
			cs = withSetting(cs, "sslrootcert", root)
			if cfg, err = pgconn.ParseConfig(cs); err != nil {
				return upstream{}, maskedError{"invalid " + flag, err}
			}
		}
	}
	for _, fb := range cfg.Fallbacks {
		if fb.Host != cfg.Host || fb.Port != cfg.Port {
			return upstream{}, errors.New("invalid " + flag + ": several hosts are not supported; give the one server the proxy fronts " +
				"(to follow a failover: an address that moves to the new primary, such as a virtual IP, a DNS name or HAProxy, or restart the proxy with the new primary's)")
		}
	}
	if cfg.Password == "" && passwordFile != "" {
		b, err := os.ReadFile(passwordFile)
		if err != nil {
			return upstream{}, fmt.Errorf("password file: %w", err)
		}
		pw := strings.TrimRight(string(b), "\r\n")
		if pw == "" {
			return upstream{}, fmt.Errorf("password file %s is empty", passwordFile)
		}
		cs = withSetting(cs, "password", pw)
	}
	network, address := pgconn.NetworkAddress(cfg.Host, cfg.Port)
	w := wire.Upstream{Network: network, Address: address, DirectTLS: cfg.SSLNegotiation == "direct"}
	w.TLSMode, w.TLS, w.SSLMode = tlsModeOf(cfg)
	w.ChannelBindingRequired = cfg.ChannelBinding == "require"
	return upstream{wire: w, controlURL: cs, display: maskPassword(cs), user: cfg.User, database: cfg.Database}, nil
}

// connString turns the shorthands into a connection string pgconn
// parses; URLs and key=value strings pass unchanged.
func connString(flag, s string) (string, error) {
	user := os.Getenv("PGUSER")
	if user == "" {
		user = "postgres"
	}
	switch {
	case s == "":
		return "", errors.New("invalid " + flag + ": empty")
	case strings.HasPrefix(s, "postgres://") || strings.HasPrefix(s, "postgresql://"):
		u, err := url.Parse(s)
		if err != nil {
			return "", fmt.Errorf("invalid %s URL: %w", flag, maskURLError(err))
		}
		if u.User == nil {
			u.User = url.User(user)
		}
		if u.Path == "" || u.Path == "/" {
			u.Path = "/postgres"
		}
		return u.String(), nil
	case strings.Contains(s, "="):
		return s, nil
	case strings.HasPrefix(s, "/"):
		dir, port := s, "5432"
		if i := strings.LastIndexByte(s, ':'); i > 0 {
			if _, err := strconv.Atoi(s[i+1:]); err == nil {
				dir, port = s[:i], s[i+1:]
			}
		}
		q := url.Values{"host": {dir}, "port": {port}}
		u := &url.URL{Scheme: "postgres", User: url.User(user), Path: "/postgres", RawQuery: q.Encode()}
		return u.String(), nil
	}
	host, port, err := net.SplitHostPort(s)
	if _, perr := strconv.Atoi(port); err == nil && perr != nil {
		err = perr
	}
	if err != nil {
		return "", fmt.Errorf("invalid %s %q: want a postgres:// URL, key=value settings, host:port or a Unix socket directory", flag, maskText(s))
	}
	u := &url.URL{Scheme: "postgres", User: url.User(user), Host: net.JoinHostPort(host, port), Path: "/postgres"}
	return u.String(), nil
}

// maskURLError keeps url.Parse's complaint without the URL, which may
// hold the password.
func maskURLError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

// withSetting adds or replaces one libpq setting in a connection string.
func withSetting(cs, key, value string) string {
	if strings.HasPrefix(cs, "postgres://") || strings.HasPrefix(cs, "postgresql://") {
		u, err := url.Parse(cs)
		if err != nil {
			return cs
		}
		if key == "password" {
			u.User = url.UserPassword(u.User.Username(), value)
			return u.String()
		}
		q := u.Query()
		q.Set(key, value)
		u.RawQuery = q.Encode()
		return u.String()
	}
	r := strings.NewReplacer(`\`, `\\`, `'`, `\'`)
	return cs + " " + key + "='" + r.Replace(value) + "'"
}

var dsnPassword = regexp.MustCompile(`(?i)(password\s*=\s*)('(?:[^'\\]|\\.)*'|\S+)`)

// userPassword is the password of a URL's user part, also in text that
// is no valid URL (a URL without its scheme).
var userPassword = regexp.MustCompile(`:[^:@/\s]+@`)

// maskText hides what looks like a password in text that quotes a
// connection string: key=value passwords (also with spaces around "=",
// which pgconn's own masking misses) and a URL's user password.
func maskText(s string) string {
	return userPassword.ReplaceAllString(dsnPassword.ReplaceAllString(s, "${1}xxxxx"), ":xxxxx@")
}

// maskedError is an error of pgconn about a connection string, shown
// with maskText applied: pgconn quotes the string in it.
type maskedError struct {
	prefix string
	err    error
}

func (e maskedError) Error() string { return e.prefix + ": " + maskText(e.err.Error()) }
func (e maskedError) Unwrap() error { return e.err }

// maskPassword hides the passwords of a connection string as libpq's
// tools do: the user's and sslpassword, the passphrase of the client key
// (the key=value pattern finds both).
func maskPassword(cs string) string {
	if strings.HasPrefix(cs, "postgres://") || strings.HasPrefix(cs, "postgresql://") {
		if u, err := url.Parse(cs); err == nil {
			q := u.Query()
			masked := false
			for _, k := range []string{"password", "sslpassword"} {
				if q.Has(k) {
					q.Set(k, "xxxxx")
					masked = true
				}
			}
			if masked {
				u.RawQuery = q.Encode()
			}
			return u.Redacted()
		}
		return "(unparsable URL)"
	}
	return dsnPassword.ReplaceAllString(cs, "${1}xxxxx")
}

// tlsModeOf reads back, from pgconn's configuration, the sslmode it
// implements: the wire mode, the TLS configuration a TLS attempt uses,
// and libpq's name for it. pgconn puts allow's TLS attempt and prefer's
// plaintext one in Fallbacks; verify-ca checks the chain in
// VerifyPeerCertificate, verify-full lets crypto/tls check it all.
// Whether there are fallbacks says nothing by itself: a host named twice
// adds one with the same TLS, and only an attempt without TLS beside one
// with it makes a mode that may end in plaintext (regression: host=db,db
// with sslmode=verify-full was read as prefer).
func tlsModeOf(cfg *pgconn.Config) (wire.TLSMode, *tls.Config, string) {
	plainToo := false
	var fallbackTLS *tls.Config
	for _, fb := range cfg.Fallbacks {
		if fb.TLSConfig == nil {
			plainToo = true
		} else if fallbackTLS == nil {
			fallbackTLS = fb.TLSConfig
		}
	}
	switch c := cfg.TLSConfig; {
	case c == nil && fallbackTLS != nil:
		return wire.TLSAllow, fallbackTLS, "allow"
	case c == nil:
		return wire.TLSDisable, nil, "disable"
	case plainToo:
		return wire.TLSPrefer, c, "prefer"
	case !c.InsecureSkipVerify:
		return wire.TLSRequire, c, "verify-full"
	case c.VerifyPeerCertificate != nil:
		return wire.TLSRequire, c, "verify-ca"
	}
	return wire.TLSRequire, cfg.TLSConfig, "require"
}

// defaultRootCert is libpq's default root certificate file,
// ~/.postgresql/root.crt, when it exists.
func defaultRootCert() string {
	home, err := os.UserHomeDir()
	if err != nil {
		return ""
	}
	p := filepath.Join(home, ".postgresql", "root.crt")
	if st, err := os.Stat(p); err == nil && !st.IsDir() {
		return p
	}
	return ""
}
