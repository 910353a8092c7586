package tests

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgproto3"
)

// Bad input on the wire through the real proxy. After each case the proxy
// must still serve: a connection opened before the bad input and a new one
// both work. A panic in the proxy would crash this test binary.

// ioTimeout bounds every raw read and write so that a proxy that neither
// answers nor closes fails the test instead of hanging it. It is a guard,
// not a synchronisation.
const ioTimeout = 30 * time.Second

// message builds a client message: type byte, int32 length (including
// itself), body.
func message(typ byte, body []byte) []byte {
	b := []byte{typ, 0, 0, 0, 0}
	binary.BigEndian.PutUint32(b[1:], uint32(4+len(body)))
	return append(b, body...)
}

// header is a message header claiming length, with no body.
func header(typ byte, length uint32) []byte {
	b := []byte{typ, 0, 0, 0, 0}
	binary.BigEndian.PutUint32(b[1:], length)
	return b
}

// startupPacket is a protocol 3.0 startup packet with the given raw
// parameter bytes (normally name\0value\0...\0).
func startupPacket(params []byte) []byte {
	b := make([]byte, 8, 8+len(params))
	binary.BigEndian.PutUint32(b[0:], uint32(8+len(params)))
	binary.BigEndian.PutUint32(b[4:], 196608)
	return append(b, params...)
}

// dialProxy opens a raw TCP connection to the proxy.
func dialProxy(t *testing.T, e *testEnv) net.Conn {
	t.Helper()
	conn, err := net.DialTimeout("tcp", e.proxyAddr(), ioTimeout)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	if err := conn.SetDeadline(time.Now().Add(ioTimeout)); err != nil {
		t.Fatal(err)
	}
	return conn
}

// loggedIn opens a raw connection and completes the startup as postgres
// (trust), returning once the proxy sent ReadyForQuery.
func loggedIn(t *testing.T, e *testEnv) (net.Conn, *pgproto3.Frontend) {
	t.Helper()
	conn := dialProxy(t, e)
	fe := pgproto3.NewFrontend(conn, conn)
	fe.Send(&pgproto3.StartupMessage{ProtocolVersion: pgproto3.ProtocolVersionNumber,
		Parameters: map[string]string{"user": "postgres", "database": e.db}})
	if err := fe.Flush(); err != nil {
		t.Fatal(err)
	}
	for {
		msg, err := fe.Receive()
		if err != nil {
			t.Fatalf("startup: %v", err)
		}
		switch m := msg.(type) {
		case *pgproto3.ReadyForQuery:
			return conn, fe
		case *pgproto3.ErrorResponse:
			t.Fatalf("startup refused: %s %s", m.Code, m.Message)
		}
	}
}

// wantProtocolViolation reads what the proxy sends after bad input: an
// ErrorResponse with SQLSTATE 08P01 (when required, or when anything is
// sent at all), then the end of the connection.
func wantProtocolViolation(t *testing.T, conn net.Conn, responseRequired bool) {
	t.Helper()
	data, err := io.ReadAll(conn)
	var netErr net.Error
	if errors.As(err, &netErr) && netErr.Timeout() {
		t.Fatalf("the proxy neither answered nor closed the connection within %s (got %q)", ioTimeout, data)
	}
	// A reset after the error is an acceptable end too; what was read counts.
	if len(data) == 0 {
		if responseRequired {
			t.Fatalf("connection closed without an ErrorResponse (read error: %v)", err)
		}
		return
	}
	fe := pgproto3.NewFrontend(bytes.NewReader(data), io.Discard)
	var sawError bool
	for {
		msg, err := fe.Receive()
		if err != nil {
			break
		}
		switch m := msg.(type) {
		case *pgproto3.ErrorResponse:
			if m.Code != "08P01" {
				t.Errorf("ErrorResponse %s %q, want SQLSTATE 08P01", m.Code, m.Message)
			}
			if m.Severity != "FATAL" && m.Severity != "ERROR" {
				t.Errorf("ErrorResponse severity %q", m.Severity)
			}
			sawError = true
		case *pgproto3.NoticeResponse, *pgproto3.ParameterStatus:
		default:
			t.Errorf("unexpected %T after bad input: %+v", msg, msg)
		}
	}
	if !sawError {
		t.Errorf("no ErrorResponse in the %d bytes the proxy sent: %q", len(data), data)
	}
}

// assertStillServing checks that the proxy serves an existing session and a
// new one after bad input on another connection.
func assertStillServing(t *testing.T, e *testEnv, existing *pgx.Conn) {
	t.Helper()
	checkIDs(t, "existing session after bad input", mustInt64s(t, existing, "SELECT snowflake.nextval()"), pgxNode)
	fresh := e.connect(t, pgx.QueryExecModeCacheStatement)
	checkIDs(t, "new session after bad input", mustInt64s(t, fresh, "SELECT snowflake.nextval() + $1::int8 * 0", int64(1)), pgxNode)
	_ = fresh.Close(context.Background())
}

func TestProtocolBadInputAfterStartup(t *testing.T) {
	e := newPgxEnv(t)
	existing := e.connect(t, pgx.QueryExecModeCacheStatement)
	validParse := message('P', []byte("\x00SELECT $1::int8\x00\x00\x00"))
	sync := message('S', nil)
	cases := []struct {
		name  string
		bytes []byte
		// contentError: the framing is intact, only a message's content is
		// bad. PostgreSQL answers such an extended-protocol message with
		// ERROR 08P01 and goes on after Sync; the proxy may do the same or
		// end the session. Framing errors must end it.
		contentError bool
	}{
		{"oversized message", header('Q', 0x7ffffff0), false},
		{"length below the header size", header('Q', 2), false},
		{"unknown message type", message('z', nil), false},
		{"HTTP request as garbage", []byte("GET / HTTP/1.1\r\nHost: localhost\r\n\r\n"), false},
		{"Query without terminator", message('Q', []byte("SELECT snowflake.nextval()")), true},
		{"Parse without terminators", append(message('P', []byte("stmt\x00SELECT snowflake.nextval()")), sync...), true},
		{"Parse of a snowflake call without parameter count", append(message('P', []byte("\x00SELECT snowflake.nextval()\x00")), sync...), true},
		{"Bind cut short", append(append(validParse, message('B', []byte("\x00\x00\x00\x01"))...), sync...), true},
		{"Bind with more values than parameters", append(append(validParse, message('B', []byte("\x00\x00\x00\x00\x00\x02\x00\x00\x00\x011\x00\x00\x00\x012\x00\x00"))...), sync...), true},
		// Messages the proxy reads with its views (wire/pgmsg) and passes on
		// unchanged when malformed: the server's answer, as without it.
		{"Query with a NUL inside its text", message('Q', []byte("SELECT snowflake.nextval()\x00garbage\x00")), true},
		{"Bind of a snowflake statement with a byte after it", slices.Concat(message('P', []byte("\x00SELECT snowflake.nextval()\x00\x00\x00")),
			message('B', []byte("\x00\x00\x00\x00\x00\x00\x00\x00x")), sync), true},
		{"Execute without a row limit", slices.Concat(message('P', []byte("\x00SELECT snowflake.nextval()\x00\x00\x00")),
			message('B', []byte("\x00\x00\x00\x00\x00\x00\x00\x00")), message('E', []byte("\x00")), sync), true},
		{"Describe with a byte after the name", append(message('D', []byte("S\x00x")), sync...), true},
		{"Close with a byte after the name", append(message('C', []byte("S\x00x")), sync...), true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			conn, fe := loggedIn(t, e)
			if _, err := conn.Write(c.bytes); err != nil {
				t.Fatal(err)
			}
			if c.contentError {
				wantProtocolErrorThenUsableOrClosed(t, fe)
			} else {
				wantProtocolViolation(t, conn, true)
			}
			assertStillServing(t, e, existing)
		})
	}
}

// wantProtocolErrorThenUsableOrClosed expects an ErrorResponse 08P01 (after
// any ParseComplete), then either the end of the connection or
// ReadyForQuery, after which the session must still answer a query.
func wantProtocolErrorThenUsableOrClosed(t *testing.T, fe *pgproto3.Frontend) {
	t.Helper()
	sawError := false
	for !sawError {
		msg, err := fe.Receive()
		if err != nil {
			t.Fatalf("no ErrorResponse before the connection ended: %v", err)
		}
		switch m := msg.(type) {
		case *pgproto3.ErrorResponse:
			if m.Code != "08P01" {
				t.Errorf("ErrorResponse %s %q, want SQLSTATE 08P01", m.Code, m.Message)
			}
			sawError = true
		case *pgproto3.ParseComplete, *pgproto3.BindComplete, *pgproto3.NoticeResponse:
		default:
			t.Fatalf("unexpected %T before the ErrorResponse: %+v", msg, msg)
		}
	}
	msg, err := fe.Receive()
	if err != nil {
		return // the session ended after the error: acceptable
	}
	if _, ok := msg.(*pgproto3.ReadyForQuery); !ok {
		t.Fatalf("after the ErrorResponse got %T %+v, want ReadyForQuery or the end of the connection", msg, msg)
	}
	fe.Send(&pgproto3.Query{String: "SELECT snowflake.nextval()"})
	if err := fe.Flush(); err != nil {
		t.Fatal(err)
	}
	var ids []int64
	for {
		msg, err := fe.Receive()
		if err != nil {
			t.Fatalf("query after the recovered error: %v", err)
		}
		switch m := msg.(type) {
		case *pgproto3.DataRow:
			var id int64
			if _, err := fmt.Sscan(string(m.Values[0]), &id); err != nil {
				t.Fatalf("DataRow %q: %v", m.Values[0], err)
			}
			ids = append(ids, id)
		case *pgproto3.ErrorResponse:
			t.Fatalf("query after the recovered error: %s %s", m.Code, m.Message)
		case *pgproto3.ReadyForQuery:
			if len(ids) != 1 {
				t.Fatalf("query after the recovered error returned %d rows", len(ids))
			}
			checkIDs(t, "nextval in the session after the error", ids, pgxNode)
			return
		}
	}
}

func TestProtocolBadStartup(t *testing.T) {
	e := newPgxEnv(t)
	existing := e.connect(t, pgx.QueryExecModeCacheStatement)
	full := startupPacket([]byte("user\x00postgres\x00database\x00" + e.db + "\x00\x00"))
	cases := []struct {
		name             string
		bytes            []byte
		closeWrite       bool // the client sends nothing more
		responseRequired bool
	}{
		{"truncated startup packet", full[:len(full)-10], true, false},
		{"length field below the minimum", []byte{0, 0, 0, 4}, false, false},
		{"huge startup length", []byte{0x7f, 0xff, 0xff, 0xff, 0, 3, 0, 0}, false, false},
		{"HTTP request instead of startup", []byte("GET / HTTP/1.1\r\nHost: localhost\r\n\r\n"), false, false},
		{"parameters without final terminator", startupPacket([]byte("user\x00postgres\x00database\x00" + e.db + "\x00")), false, true},
		{"parameter name without value", startupPacket([]byte("user\x00postgres\x00database\x00")), false, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			conn := dialProxy(t, e)
			if _, err := conn.Write(c.bytes); err != nil {
				t.Fatal(err)
			}
			if c.closeWrite {
				if err := conn.(*net.TCPConn).CloseWrite(); err != nil {
					t.Fatal(err)
				}
			}
			wantProtocolViolation(t, conn, c.responseRequired)
			assertStillServing(t, e, existing)
		})
	}
}

func TestProtocolCancelRequestThroughTheProxy(t *testing.T) {
	e := newPgxEnv(t)
	direct := e.connectDirect(t)
	sleeper := func(name string) (*pgx.Conn, chan error) {
		conn := e.connectWith(t, pgx.QueryExecModeCacheStatement, func(c *pgx.ConnConfig) {
			c.RuntimeParams["application_name"] = name
		})
		done := make(chan error, 1)
		go func() {
			_, err := conn.Exec(context.Background(), "SELECT pg_sleep(60)")
			done <- err
		}()
		return conn, done
	}
	// waitSleeping polls the server (round trips, no sleeps) until the
	// session named name runs pg_sleep.
	waitSleeping := func(name string) {
		t.Helper()
		for i := 0; ; i++ {
			if mustInt64(t, direct, "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 AND state = 'active' AND query = 'SELECT pg_sleep(60)'", name) == 1 {
				return
			}
			if i > 1_000_000 {
				t.Fatalf("session %s never started pg_sleep", name)
			}
		}
	}
	a, aDone := sleeper("cancel_a")
	_, bDone := sleeper("cancel_b")
	waitSleeping("cancel_a")
	waitSleeping("cancel_b")

	if err := a.PgConn().CancelRequest(context.Background()); err != nil {
		t.Fatalf("CancelRequest through the proxy: %v", err)
	}
	wantError(t, "pg_sleep(60) after CancelRequest", <-aDone, "57014", "canceling statement due to user request")
	// Only the targeted backend was cancelled.
	if n := mustInt64(t, direct, "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'cancel_b' AND state = 'active'"); n != 1 {
		t.Errorf("the other session is no longer running pg_sleep (%d active): the cancel reached the wrong backend", n)
	}
	select {
	case err := <-bDone:
		t.Errorf("the other session's pg_sleep ended: %v", err)
	default:
	}
	checkIDs(t, "the cancelled session afterwards", mustInt64s(t, a, "SELECT snowflake.nextval()"), pgxNode)
	// End the other sleeper on the server so that the test does not wait.
	mustInt64s(t, direct, "SELECT count(*) FROM (SELECT pg_cancel_backend(pid) FROM pg_stat_activity WHERE application_name = 'cancel_b') s")
	if err := <-bDone; err == nil {
		t.Error("the other session's pg_sleep was not cancelled by pg_cancel_backend")
	}
}
