// Package rewrite turns SQL text into a plan.Plan: what the proxy must do
// with a statement string before (or instead of) sending it to the server.
// It is the only package that imports the PostgreSQL parser (pg_query_go,
// cgo); everything it produces is described by the pure-Go package
// rewrite/plan, so callers (wire) build and test without cgo.
//
// Layers, in the order Plan applies them:
//
//   - rewriter.go: Config, Rewriter and Plan, which applies the layers
//     below.
//   - prefilter.go: NeedsParse decides without parsing or allocating
//     whether the text may concern the proxy at all. Most traffic stops
//     here and gets plan.Passthrough.
//   - cache.go: plans are cached by SQL text (bounded, sharded, CLOCK
//     eviction); a hit costs a hash and a read lock.
//   - analyze.go: Parses (for tests: does the grammar read this text),
//     and analyze, which parses with pg_query and walks each raw statement,
//     collecting edits (byte ranges of the original text to replace) that
//     become the plan's Template. tokens.go finds the ends of calls and
//     statements (the parse tree only records where nodes start).
//   - calls.go: snowflake.nextval/currval calls evaluated once per
//     execution (SELECT without FROM, VALUES) become Nextval/Currval slots;
//     Local plans for statements the proxy can answer alone.
//   - names.go: a slot renders as something else than the call, so where
//     the call names a result column or a FROM item the rewritten text
//     names it explicitly, as PostgreSQL names the original.
//   - extension.go: CREATE/DROP/ALTER EXTENSION snowflake become one slot
//     each, filled by the session with the shim's SQL.
//   - setnode.go: SET/RESET snowflake.node become a DO block that enforces
//     what the real extension enforces (superuser, integer 0..1023).
//   - insert.go: INSERT ... VALUES targets (also inside WITH), recorded in
//     plan.Inserts for the session to complete with the targets' defaults.
//   - copy.go: COPY table (columns) FROM STDIN, recorded in plan.Copy
//     with its options for the session to complete its rows with the
//     target's snowflake defaults.
//   - relname.go: which relation-name literals are safe to pass to the
//     session's hidden queries.
//   - touch.go: which session or catalog state a statement may change.
//
// Generated values are computed before a string is sent, from the session's
// mirror of the node, search_path, role, read-only state and catalog. In a
// multi-statement string, statements after one that may change that state
// (any touch but TouchPrepared), and statements calling set_config, get no
// slots.
//
// What the package deliberately leaves to the server (and so to the SQL
// shim): every call it cannot prove to be evaluated exactly once per
// execution, calls with arguments other than a literal sequence name, and
// everything that does not parse (newer syntax than pg_query_go's grammar,
// PostgreSQL 17): plan.Unparsed, after which the session assumes any state
// may have changed and IDs may have been issued in the shim.
package rewrite
