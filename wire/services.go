package wire

import (
	"context"
	"unsafe"

	"github.com/snowflake-proxy/snowflake-proxy/generator"
	"github.com/snowflake-proxy/snowflake-proxy/rewrite/plan"
)

// Rewriter analyses SQL text. rewrite.Rewriter implements it; wire depends
// only on this interface so that it builds and tests without cgo.
type Rewriter interface {
	// Plan returns the plan for sql; never nil (plan.Passthrough when the
	// proxy has nothing to do, including text that does not parse: the
	// server then reports the syntax error itself). The plan is shared and
	// must not be modified. Plan must not retain sql: the session passes
	// text that aliases its read buffer (viewString), valid only until
	// Plan returns.
	Plan(sql string) *plan.Plan
}

// viewString returns b as a string without copying it. The string is valid
// only while b's bytes are not reused: the sessions pass SQL this way to
// Rewriter.Plan, which does not retain it, so that relaying a Query or a
// Parse allocates nothing.
func viewString(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) }

// Snowflakes serves the fast path and the extension statements. compat
// implements it on top of generator.
type Snowflakes interface {
	// NextvalBatch fills reqs with the next snowflakes of their sequences
	// (by OID) in database, with node bits node (1..1023), following the
	// pgEdge rule and each request's INCREMENT, as the calls of one
	// statement evaluated at one instant (generator.Generator.NextBatch).
	// The session has already resolved the names and checked privileges,
	// node and transaction state.
	//
	// Any error means only that the fast path cannot serve these calls
	// (for example the shim is not installed in that database): the
	// session then lets the server's shim produce the values or the error.
	// Errors are logged, never shown to the client.
	NextvalBatch(ctx context.Context, database string, node int, reqs []generator.Request) error
	// TryNextvalBatch is NextvalBatch for the event loop's thread, which
	// must never wait: ok is false (and err nil) when NextvalBatch would
	// have to wait, for a lease or anything else; it has then issued
	// nothing (but for a race with another session, which loses positions
	// and never repeats them), and the session continues on its
	// goroutines, which call NextvalBatch.
	TryNextvalBatch(database string, node int, reqs []generator.Request) (ok bool, err error)
	// ExtensionSQL returns one SQL statement (a DO block) that performs the
	// extension statement op in the client's own session and transaction.
	ExtensionSQL(op plan.SlotOp, opts *plan.ExtensionOptions) (string, error)
	// CatalogEpochs returns two numbers for database. catalog changes
	// whenever its catalog may have changed by DDL made anywhere (another
	// session, another proxy, a direct connection), or is 0 when such
	// changes cannot be seen there; with 0, column defaults are left to
	// the server (defaults.go). privilege moves whenever what roles may
	// use may have changed there, announced or not (a role's membership
	// revoked), or is 0 when such changes cannot be seen. Sessions compare
	// them with the values their caches were built at, on every INSERT:
	// it must be cheap (a map lookup and atomic loads) and must not block.
	CatalogEpochs(database string) (catalog, privilege uint64)
	// AwaitBlocks waits, briefly and bounded, until the per-row blocks of
	// the sequences that database's snowflake column defaults name are
	// made (docs/state-model.md, "Blocks"), where CatalogEpochs is 0 (no
	// event trigger makes them with the DDL). A session calls it on its
	// goroutine before an INSERT whose defaults go to the server, once
	// after its own committed DDL, so that the INSERT is planned with
	// them.
	AwaitBlocks(database string)
	// FenceTicket returns a ticket for the requests of one session
	// (generator.Request.After): their IDs continue above every ID issued
	// before it by other paths (the server's shim, setval, ALTER
	// SEQUENCE). It must not block: the next NextvalBatch with the ticket
	// waits for a fresh lease instead; other sessions' calls do not.
	FenceTicket() uint64
}
