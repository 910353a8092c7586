package wire

import (
	"errors"
	"net"
	"net/url"
	"reflect"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/snowflake-proxy/snowflake-proxy/internal/pgserver"
	"github.com/snowflake-proxy/snowflake-proxy/internal/pgtest"
)

// The options string read as PostgreSQL reads it (pg_split_opts, getopt,
// ParseLongOption).
func TestOptionNodeEntries(t *testing.T) {
	for _, c := range []struct {
		opts string
		want []nodeEntry
	}{
		{"-c snowflake.node=5", []nodeEntry{{"snowflake.node", "5"}}},
		{"-csnowflake.node=5", []nodeEntry{{"snowflake.node", "5"}}},
		{"--snowflake.node=5", []nodeEntry{{"snowflake.node", "5"}}},
		{"  -c   Snowflake.Node=5000  ", []nodeEntry{{"Snowflake.Node", "5000"}}},
		{"-e -c work_mem=4MB -c snowflake.node=1 -c snowflake.node=2", []nodeEntry{{"snowflake.node", "1"}, {"snowflake.node", "2"}}},
		{"-Ec snowflake.node=3", []nodeEntry{{"snowflake.node", "3"}}},
		{"word -c snowflake.node=4", []nodeEntry{{"snowflake.node", "4"}}}, // GNU getopt skips other words
		{`-c snowflake.node=a\ b`, []nodeEntry{{"snowflake.node", "a b"}}},
		{"-c snowflake.node=", []nodeEntry{{"snowflake.node", ""}}},
		// Regression: any options string that mentioned snowflake.node
		// counted as setting it, so the proxy's --node was not passed.
		{"-c application_name=snowflake.node", nil},
		{`-c application_name=a\ -c\ snowflake.node=7`, nil},
		{"-d snowflake.node=5", nil}, // -d takes the word as its argument
		{"-- -c snowflake.node=5", nil},
		{"-c snowflake.node", nil}, // the server refuses it itself
		{"-c snowflake-node=4", nil},
		{"-c", nil},
		{"", nil},
	} {
		if got := optionNodeEntries(c.opts); !reflect.DeepEqual(got, c.want) {
			t.Errorf("optionNodeEntries(%q) = %q, want %q", c.opts, got, c.want)
		}
	}
}

// startupRole creates a login role that is not a superuser, dropped at the
// end of the test.
func startupRole(t *testing.T, srv *pgserver.Server) string {
	t.Helper()
	const role = "sf_startup_plain"
	pgtest.Exec(t, srv, "postgres", "DROP ROLE IF EXISTS "+role)
	pgtest.Exec(t, srv, "postgres", "CREATE ROLE "+role+" LOGIN")
	t.Cleanup(func() { pgtest.Exec(t, srv, "postgres", "DROP ROLE IF EXISTS "+role) })
	return role
}

// nodeURL is a connection URL through p as user with libpq options.
func nodeURL(p *proxy, user, db, options string) string {
	host, port, _ := net.SplitHostPort(p.addr)
	u := "postgres://" + user + "@" + host + ":" + port + "/" + db + "?sslmode=disable"
	if options != "" {
		u += "&options=" + strings.ReplaceAll(url.QueryEscape(options), "+", "%20")
	}
	return u
}

func showNode(t *testing.T, c *pgconn.PgConn) string {
	t.Helper()
	r := c.ExecParams(ctxT(t), "SELECT current_setting('snowflake.node')", nil, nil, nil, nil).Read()
	if r.Err != nil {
		t.Fatal(r.Err)
	}
	return string(r.Rows[0][0])
}

// wantNodeFatal checks the ErrorResponse fields the extension's refusal has.
func wantNodeFatal(t *testing.T, err error, code, msg, hint string) {
	t.Helper()
	var pe *pgconn.PgError
	if !errors.As(err, &pe) {
		t.Fatalf("want FATAL %s %q, got %v", code, msg, err)
	}
	if pe.Severity != "FATAL" || pe.SeverityUnlocalized != "FATAL" || pe.Code != code || pe.Message != msg || pe.Hint != hint {
		t.Fatalf("got %s/%s %s %q hint %q, want FATAL %s %q hint %q",
			pe.Severity, pe.SeverityUnlocalized, pe.Code, pe.Message, pe.Hint, code, msg, hint)
	}
}

// snowflake.node set in the startup packet: refused as the extension
// (preloaded, as pgEdge documents) refuses it, with FATAL; accepted
// values are stored as the extension stores them. Regression: the proxy
// passed any value to the server, whose placeholder took it, and the
// session failed only at its first nextval.
func TestStartupNode(t *testing.T) {
	srv := pgtest.Shared(t)
	p := startProxy(t, srv, Config{Node: 7})
	su := srv.Superuser()

	for _, c := range []struct {
		name, options string
		params        map[string]string
		code, msg     string
		hint          string
	}{
		{name: "options out of range", options: "-c snowflake.node=5000",
			code: "22023", msg: `5000 is outside the valid range for parameter "snowflake.node" (0 .. 1023)`},
		{name: "parameter out of range", params: map[string]string{"snowflake.node": "5000"},
			code: "22023", msg: `5000 is outside the valid range for parameter "snowflake.node" (0 .. 1023)`},
		{name: "long switch, name as spelled", options: "--Snowflake.Node=-1",
			code: "22023", msg: `-1 is outside the valid range for parameter "Snowflake.Node" (0 .. 1023)`},
		{name: "not an integer", options: "-c snowflake.node=abc",
			code: "22023", msg: `invalid value for parameter "snowflake.node": "abc"`},
		{name: "beyond integers", params: map[string]string{"snowflake.node": "99999999999"},
			code: "22023", msg: `invalid value for parameter "snowflake.node": "99999999999"`, hint: "Value exceeds integer range."},
		{name: "valid then invalid", options: "-c snowflake.node=3", params: map[string]string{"snowflake.node": "1024"},
			code: "22023", msg: `1024 is outside the valid range for parameter "snowflake.node" (0 .. 1023)`},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg, err := pgconn.ParseConfig(nodeURL(p, su, "postgres", c.options))
			if err != nil {
				t.Fatal(err)
			}
			for k, v := range c.params {
				cfg.RuntimeParams[k] = v
			}
			_, err = pgconn.ConnectConfig(ctxT(t), cfg)
			wantNodeFatal(t, err, c.code, c.msg, c.hint)
		})
	}

	for _, c := range []struct {
		name, options string
		want          string
	}{
		{"none: the proxy's node", "", "7"},
		{"options", "-c snowflake.node=5", "5"},
		// Regression: the name was compared case-sensitively and the
		// proxy's node, appended after it, won.
		{"name in other case", "-c Snowflake.Node=3", "3"},
		{"spelled otherwise", "-c snowflake.node=0x10", "16"},
		{"zero", "-c snowflake.node=0", "0"},
		{"mentioned, not set", "-c application_name=snowflake.node", "7"},
	} {
		t.Run(c.name, func(t *testing.T) {
			conn := connectPg(t, nodeURL(p, su, "postgres", c.options))
			if got := showNode(t, conn); got != c.want {
				t.Fatalf("snowflake.node = %q, want %q", got, c.want)
			}
		})
	}

	t.Run("server refusals come first", func(t *testing.T) {
		_, err := pgconn.Connect(ctxT(t), nodeURL(p, su, "no_such_database", "-c snowflake.node=5000"))
		var pe *pgconn.PgError
		if !errors.As(err, &pe) || pe.Code != "3D000" {
			t.Fatalf("want the server's 3D000, got %v", err)
		}
	})
}

// A role that is not a superuser may not set the superuser-only setting at
// startup unless granted SET on it (PostgreSQL 15); then its values are
// checked as a superuser's.
func TestStartupNodePrivilege(t *testing.T) {
	srv := pgtest.Shared(t)
	p := startProxy(t, srv, Config{Node: 7})
	role := startupRole(t, srv)

	_, err := pgconn.Connect(ctxT(t), nodeURL(p, role, "postgres", "-c snowflake.node=5"))
	wantNodeFatal(t, err, "42501", `permission denied to set parameter "snowflake.node"`, "")
	// The value is not looked at before the privilege.
	_, err = pgconn.Connect(ctxT(t), nodeURL(p, role, "postgres", "-c snowflake.node=5000"))
	wantNodeFatal(t, err, "42501", `permission denied to set parameter "snowflake.node"`, "")
	// Without setting it the role connects, with the proxy's node.
	if got := showNode(t, connectPg(t, nodeURL(p, role, "postgres", ""))); got != "7" {
		t.Fatalf("snowflake.node = %q, want 7", got)
	}

	pgtest.Exec(t, srv, "postgres", "GRANT SET ON PARAMETER snowflake.node TO "+role)
	t.Cleanup(func() { pgtest.Exec(t, srv, "postgres", "REVOKE SET ON PARAMETER snowflake.node FROM "+role) })
	if got := showNode(t, connectPg(t, nodeURL(p, role, "postgres", "-c snowflake.node=5"))); got != "5" {
		t.Fatalf("snowflake.node = %q, want 5", got)
	}
	_, err = pgconn.Connect(ctxT(t), nodeURL(p, role, "postgres", "-c snowflake.node=5000"))
	wantNodeFatal(t, err, "22023", `5000 is outside the valid range for parameter "snowflake.node" (0 .. 1023)`, "")
}

// On the wire: the refusal comes after the server's AuthenticationOk, as
// the server's own does, and ends the connection; no ReadyForQuery.
func TestStartupNodeRawPacket(t *testing.T) {
	srv := pgtest.Shared(t)
	p := startProxy(t, srv, Config{Node: 7})
	c := rawConn(t, p)
	fe := pgproto3.NewFrontend(c, c)
	fe.Send(&pgproto3.StartupMessage{ProtocolVersion: pgproto3.ProtocolVersionNumber,
		Parameters: map[string]string{"user": srv.Superuser(), "database": "postgres", "snowflake.node": "5000"}})
	if err := fe.Flush(); err != nil {
		t.Fatal(err)
	}
	authOK := false
	for {
		m, err := fe.Receive()
		if err != nil {
			t.Fatalf("no ErrorResponse: %v", err)
		}
		switch m := m.(type) {
		case *pgproto3.AuthenticationOk:
			authOK = true
		case *pgproto3.ReadyForQuery:
			t.Fatal("ReadyForQuery: the session was admitted")
		case *pgproto3.ErrorResponse:
			if !authOK {
				t.Fatal("error before AuthenticationOk")
			}
			if m.Severity != "FATAL" || m.Code != "22023" ||
				m.Message != `5000 is outside the valid range for parameter "snowflake.node" (0 .. 1023)` {
				t.Fatalf("got %+v", m)
			}
			if _, err := fe.Receive(); err == nil {
				t.Fatal("connection not closed after the error")
			}
			return
		}
	}
}

// A wrong password is the answer even when the node is wrong too: the
// server authenticates before it applies startup settings.
func TestStartupNodeAfterPassword(t *testing.T) {
	srv := pgtest.Start(t, pgserver.Options{Password: "secret",
		HBA: []string{"local all all trust", "host all all 127.0.0.1/32 scram-sha-256"}})
	p := startProxy(t, srv, Config{Node: 7})
	u := strings.Replace(nodeURL(p, srv.Superuser(), "postgres", "-c snowflake.node=5000"), "@", ":wrong@", 1)
	_, err := pgconn.Connect(ctxT(t), u)
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Code != "28P01" {
		t.Fatalf("want the server's 28P01, got %v", err)
	}
	u = strings.Replace(u, ":wrong@", ":secret@", 1)
	_, err = pgconn.Connect(ctxT(t), u)
	wantNodeFatal(t, err, "22023", `5000 is outside the valid range for parameter "snowflake.node" (0 .. 1023)`, "")
}
