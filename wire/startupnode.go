package wire

import (
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/snowflake-proxy/snowflake-proxy/internal/guc"
	"github.com/snowflake-proxy/snowflake-proxy/wire/pgmsg"
)

// snowflake.node in the startup packet.
//
// With the extension preloaded, snowflake.node is a real setting from
// server start: superuser-only, integer 0..1023. A client that sets it in
// its startup packet (options=-c snowflake.node=N, or a snowflake.node
// parameter) is refused with FATAL once the server has authenticated it
// and, with the database checked, applies the startup settings: 42501
// "permission denied to set parameter" for a role that may not set it,
// 22023 for a value out of range or not an integer. A stock server takes
// any text for the placeholder. So the proxy reads the client's values
// before dialling (readStartupNode) and decides when the server sends its
// first ReadyForQuery (admitStartupNode): the server's own refusals
// (password, database) come first, as they would.

// Bounds of snowflake.node as the extension declares it.
const (
	nodeMin = 0
	nodeMax = 1023
)

// startupNode is what a client's startup packet sets snowflake.node to.
type startupNode struct {
	name string     // the setting's name as the first entry spells it
	err  *guc.Error // the first value the server would refuse; nil: none
}

// nodeEntry is one setting of snowflake.node in a startup packet.
type nodeEntry struct{ name, value string }

// readStartupNode reads the client's settings of snowflake.node from the
// startup parameters, remembers them for admitStartupNode, and returns the
// value the proxy appends as the packet's last parameter (the server
// applies parameters in order, so it wins), "" for none: the proxy's own
// node when the client sets none, or the client's last value spelled as
// the extension stores it (0x10 is 16) when the client spelled it
// otherwise, since a placeholder keeps the text it is given.
func (ss *session) readStartupNode(params [][2]string) string {
	entries := nodeEntries(params)
	if len(entries) == 0 {
		if ss.cfg.Node != 0 {
			return strconv.Itoa(ss.cfg.Node)
		}
		return ""
	}
	chk := &startupNode{name: entries[0].name}
	var n int32
	for _, e := range entries {
		var err *guc.Error
		if n, err = guc.CheckInt(e.name, e.value, nodeMin, nodeMax); err != nil && chk.err == nil {
			chk.err = err
		}
	}
	ss.startupNode = chk
	if canon := strconv.Itoa(int(n)); chk.err == nil && entries[len(entries)-1].value != canon {
		return canon
	}
	return ""
}

// nodeEntries lists the snowflake.node settings of a startup packet in the
// order the server applies them: the switches of options first, then the
// other parameters in packet order.
func nodeEntries(params [][2]string) []nodeEntry {
	var out []nodeEntry
	for _, p := range params {
		if p[0] == "options" {
			out = append(out, optionNodeEntries(p[1])...)
		}
	}
	for _, p := range params {
		switch {
		case p[0] == "user", p[0] == "database", p[0] == "options", p[0] == "replication",
			strings.HasPrefix(p[0], "_pq_."):
		case strings.EqualFold(p[0], nodeStartupName):
			out = append(out, nodeEntry{p[0], p[1]})
		}
	}
	return out
}

// switchesWithArg are the switches of PostgreSQL's backend getopt string
// (process_postgres_switches) that take an argument.
const switchesWithArg = "BcCDdfhkNprStvW-"

// optionNodeEntries finds the -c name=value and --name=value switches that
// set snowflake.node in a startup options string, reading it as the
// server does: split at unescaped white space (pg_split_opts), then GNU
// getopt (grouped switches, an argument attached or in the next word,
// other words skipped, "--" alone ends the switches), and dashes in the
// name read as underscores (ParseLongOption).
func optionNodeEntries(opts string) []nodeEntry {
	var out []nodeEntry
	args := splitOptions(opts)
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			break
		}
		if len(a) < 2 || a[0] != '-' {
			continue
		}
		for j := 1; j < len(a); j++ {
			if !strings.ContainsRune(switchesWithArg, rune(a[j])) {
				continue // a switch without argument, or one the server refuses
			}
			var arg string
			if j+1 < len(a) {
				arg = a[j+1:]
			} else if i+1 < len(args) {
				i++
				arg = args[i]
			} else {
				break // the server refuses a switch without its argument
			}
			if a[j] == 'c' || a[j] == '-' {
				name, value, ok := strings.Cut(arg, "=")
				name = strings.ReplaceAll(name, "-", "_")
				if ok && strings.EqualFold(name, nodeStartupName) {
					out = append(out, nodeEntry{name, value})
				}
			}
			break
		}
	}
	return out
}

// splitOptions is pg_split_opts: words separated by white space, where a
// backslash makes the next character part of the word.
func splitOptions(s string) []string {
	var out []string
	var w strings.Builder
	for i := 0; i < len(s); {
		for i < len(s) && isSpace(s[i]) {
			i++
		}
		if i == len(s) {
			break
		}
		w.Reset()
		escaped := false
		for ; i < len(s); i++ {
			c := s[i]
			if isSpace(c) && !escaped {
				break
			}
			if !escaped && c == '\\' {
				escaped = true
				continue
			}
			escaped = false
			w.WriteByte(c)
		}
		out = append(out, w.String())
	}
	return out
}

func isSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r'
}

// admitStartupNode runs at the server's first ReadyForQuery (body z),
// before it is relayed: it refuses the session as the extension would for
// the snowflake.node the client set (errSessionDone after the FATAL), or
// returns the ReadyForQuery body to relay. The role's privilege comes from
// is_superuser and, for other roles on PostgreSQL 15 and later, from the
// server (GRANT SET ON PARAMETER).
func (ss *session) admitStartupNode(z []byte) ([]byte, error) {
	chk := ss.startupNode
	if chk == nil {
		return z, nil
	}
	ss.startupNode = nil
	z = append([]byte(nil), z...) // the hidden query below reuses the read buffer
	if ss.sh.params["is_superuser"] != "on" {
		ok, err := ss.maySetNode()
		if err != nil {
			return nil, err
		}
		if !ok {
			return nil, ss.refuseStartup(codeInsufficientPrivilege, `permission denied to set parameter "`+chk.name+`"`, "")
		}
	}
	if chk.err != nil {
		return nil, ss.refuseStartup(codeInvalidParameterValue, chk.err.Message, chk.err.Hint)
	}
	return z, nil
}

// SQLSTATEs of the extension's refusals of snowflake.node.
const (
	codeInsufficientPrivilege = "42501"
	codeInvalidParameterValue = "22023"
)

// maySetNode asks the server whether the session's role holds SET on
// snowflake.node. Before PostgreSQL 15 no role but a superuser can.
func (ss *session) maySetNode() (bool, error) {
	v := ss.sh.params["server_version"] // "15.4 (Debian ...)", "16beta1"
	end := strings.IndexFunc(v, func(r rune) bool { return r < '0' || r > '9' })
	if end < 0 {
		end = len(v)
	}
	if major, _ := strconv.Atoi(v[:end]); major < 15 {
		return false, nil
	}
	const q = "SELECT pg_catalog.has_parameter_privilege('" + nodeStartupName + "', 'SET')"
	msg := pgmsg.Query{SQL: []byte(q)}.Append(nil)
	if _, err := ss.cp.sw.Write(msg); err != nil {
		return false, ss.sh.upstreamLost(err)
	}
	if err := ss.cp.sw.Flush(); err != nil {
		return false, ss.sh.upstreamLost(err)
	}
	granted := false
	for {
		typ, _, err := ss.sp.sr.next()
		if err != nil {
			return false, ss.sh.upstreamLost(err)
		}
		switch typ {
		case 'E', 'S':
			body, err := ss.sp.sr.read()
			if err != nil {
				return false, ss.sh.upstreamLost(err)
			}
			if typ == 'S' {
				ss.sh.noteParameter(body)
			}
			var f pgmsg.Fields
			if typ == 'E' {
				f, _ = pgmsg.ReadFields(body)
			}
			if typ == 'S' || f.Fatal() {
				// Relayed as during authentication; after a FATAL the
				// server ends the session and its error is the answer.
				var start int
				ss.out, start = pgmsg.Begin(ss.out[:0], typ)
				ss.out = pgmsg.Finish(append(ss.out, body...), start)
				if _, err := ss.sh.cw.Write(ss.out); err != nil {
					return false, &Error{Kind: KindClientIO, Message: "write", Err: err}
				}
			}
			if f.Fatal() {
				_ = ss.sh.cw.Flush()
				ss.sh.noteServerFatal(f)
				return false, errSessionDone
			}
		case 'D':
			body, err := ss.sp.sr.read()
			if err != nil {
				return false, ss.sh.upstreamLost(err)
			}
			if row := decodeDataRow(body); len(row) == 1 && row[0] != nil && *row[0] == "t" {
				granted = true
			}
		case 'Z':
			if _, err := ss.sp.sr.read(); err != nil {
				return false, ss.sh.upstreamLost(err)
			}
			return granted, nil
		default: // RowDescription, CommandComplete, NoticeResponse
			if err := ss.sp.sr.skip(); err != nil {
				return false, ss.sh.upstreamLost(err)
			}
		}
	}
}

// refuseStartup ends the session during startup with the FATAL error the
// server would have sent, and tells the server goodbye.
func (ss *session) refuseStartup(code, msg, hint string) error {
	ss.log.Info("session refused: snowflake.node in the startup packet", logUser, ss.user, "sqlstate", code, logError, msg)
	e := &pgproto3.ErrorResponse{Severity: "FATAL", SeverityUnlocalized: "FATAL", Code: code, Message: msg, Hint: hint}
	b, _ := e.Encode(nil)
	if _, err := ss.sh.cw.Write(b); err != nil {
		return &Error{Kind: KindClientIO, Message: "write", Err: err}
	}
	if err := ss.sh.cw.Flush(); err != nil {
		return &Error{Kind: KindClientIO, Message: "write", Err: err}
	}
	_, _ = ss.cp.sw.Write(terminate)
	_ = ss.cp.sw.Flush()
	ss.ending = ending{outcome: OutcomeRefused, code: code, message: msg}
	return errSessionDone
}
