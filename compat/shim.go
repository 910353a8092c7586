package compat

import (
	"embed"
	"encoding/hex"
	"fmt"
	"strings"

	"github.com/snowflake-proxy/snowflake-proxy/rewrite/plan"
)

// NotifyChannel is the channel the shim's event trigger notifies after DDL
// (payload: the command tag). Only installed when a superuser ran CREATE
// EXTENSION.
const NotifyChannel = "snowflake_proxy_catalog"

//go:embed sql/*.sql
var sqlFiles embed.FS

func mustRead(name string) string {
	b, err := sqlFiles.ReadFile("sql/" + name)
	if err != nil {
		panic(err) // embedded at build time: cannot happen
	}
	return stripHeader(string(b))
}

// stripHeader drops the comment lines at the top of an embedded file: they
// document the file, the server need not read them on every install.
func stripHeader(s string) string {
	for strings.HasPrefix(s, "--") {
		i := strings.IndexByte(s, '\n')
		if i < 0 {
			return ""
		}
		s = s[i+1:]
	}
	return strings.TrimLeft(s, "\n")
}

var (
	locksSQL       = mustRead("locks.sql")
	functionsSQL   = mustRead("functions.sql")
	eventsSQL      = mustRead("events.sql")
	installSQL     = mustRead("install.sql")
	dropSQL        = mustRead("drop.sql")
	updateSQL      = mustRead("update.sql")
	repairSQL      = mustRead("repair.sql")
	versionNameSQL = mustRead("versionname.sql")
)

// ExtensionSQL returns the DO statement that performs the extension
// statement op (plan.CreateExtension, DropExtension or AlterExtension) with
// opts (nil means no options). The proxy sends it in place of the client's
// statement and reports it with the client's command tag.
func ExtensionSQL(op plan.SlotOp, opts *plan.ExtensionOptions) (string, error) {
	if opts == nil {
		opts = &plan.ExtensionOptions{}
	}
	r := strings.NewReplacer(
		"{{LOCKS}}", locksSQL,
		"{{FUNCTIONS}}", functionsSQL,
		"{{EVENT_TRIGGERS}}", eventsSQL,
		"{{VERSIONS}}", versionsArray(),
		"{{DEFAULT_VERSION}}", sqlText(DefaultVersion),
		"{{REPAIR_FROM}}", sqlText(repairFrom),
		"{{VERSION_NAME}}", versionNameSQL,
		"{{REPAIR}}", repairSQL,
		"{{IF_NOT_EXISTS}}", sqlBool(opts.IfNotExists),
		"{{IF_EXISTS}}", sqlBool(opts.IfExists),
		"{{CASCADE}}", sqlBool(opts.Cascade),
		"{{VERSION}}", sqlText(opts.Version),
		"{{SCHEMA}}", sqlText(opts.Schema),
		"{{DROP_OTHERS}}", dropOthers(opts),
	)
	switch op {
	case plan.CreateExtension:
		return r.Replace(installSQL), nil
	case plan.DropExtension:
		return r.Replace(dropSQL), nil
	case plan.AlterExtension:
		return r.Replace(updateSQL), nil
	default:
		return "", fmt.Errorf("compat: ExtensionSQL: op %d is not an extension statement", op)
	}
}

// dropOthers is the statement that drops the other extensions a DROP
// EXTENSION names besides snowflake (ExtensionOptions.Others, quoted
// identifiers), with the same IF EXISTS and CASCADE; empty when none.
func dropOthers(opts *plan.ExtensionOptions) string {
	if len(opts.Others) == 0 {
		return ""
	}
	stmt := "DROP EXTENSION "
	if opts.IfExists {
		stmt += "IF EXISTS "
	}
	stmt += strings.Join(opts.Others, ", ")
	if opts.Cascade {
		stmt += " CASCADE"
	}
	return "EXECUTE " + sqlText(stmt) + ";"
}

func sqlBool(b bool) string {
	if b {
		return "true"
	}
	return "false"
}

// sqlText quotes s as a SQL string literal; "" becomes NULL (option
// absent). The literal sits inside the dollar-quoted DO body, so anything
// but plain version-like text is spelled in hex: no quote, backslash or
// dollar sign of the client's text can end the literal or the body.
func sqlText(s string) string {
	if s == "" {
		return "NULL"
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-') {
			return "pg_catalog.convert_from(pg_catalog.decode('" + hex.EncodeToString([]byte(s)) + "', 'hex'), 'UTF8')"
		}
	}
	return "'" + s + "'"
}
