package compat

import "strings"

// versions are the pgEdge extension versions the shim installs, oldest
// first, as its update scripts chain them: CREATE EXTENSION snowflake
// VERSION v accepts these, and ALTER EXTENSION snowflake UPDATE TO v moves
// only forward along them, as PostgreSQL finds no path backwards.
//
// They are the releases whose ID layout is the current one and whose SQL
// API the shim provides, spelled as pgEdge's scripts spell them: 2.2, 2.3
// and 2.4, then 2.5.0 and 2.6.0 (pgEdge adopted three-digit versions with
// 2.5.0; a "2.5" was never released). "2.6" is the version the shim
// reported before it knew of the others: shims installed then keep an
// update path to 2.6.0, and statements that pin "2.6" keep working. The
// older scripts the extension still carries (1.0 to 2.0) are refused:
// their format() reports the node under "node" and their conversion
// functions behave otherwise.
var versions = []string{"2.2", "2.3", "2.4", "2.5.0", "2.6", "2.6.0"}

// DefaultVersion is what CREATE EXTENSION snowflake installs without
// VERSION and ALTER EXTENSION snowflake UPDATE moves to without TO: the
// extension's default_version.
const DefaultVersion = "2.6.0"

// repairFrom is the version whose update script repairs the sequences
// converted by earlier versions (sql/repair.sql): it runs when an install
// or update passes from the version before it to it.
const repairFrom = "2.5.0"

// Versions returns the versions the shim installs, oldest first.
func Versions() []string { return append([]string(nil), versions...) }

// versionsArray is versions as a SQL text[] literal.
func versionsArray() string {
	q := make([]string, len(versions))
	for i, v := range versions {
		q[i] = sqlText(v)
	}
	return "ARRAY[" + strings.Join(q, ", ") + "]::text[]"
}
