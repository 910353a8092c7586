package wire

import (
	"fmt"

	"github.com/snowflake-proxy/snowflake-proxy/rewrite/plan"
)

// Fallback says why a statement's snowflake IDs were left to the server's
// shim instead of the fast path. Sessions count fallbacks per statement
// execution (a Query, or a Bind), never per message: Stats.Fallbacks.
type Fallback uint8

const (
	FallbackFailedTransaction Fallback = iota + 1 // the transaction is aborted: the server answers 25P02
	FallbackReadOnly                              // a read-only transaction, or a hot standby
	FallbackNoNode                                // the session has no snowflake.node
	FallbackNoShim                                // no CREATE EXTENSION snowflake in the database
	FallbackNoUsage                               // the role has neither USAGE nor UPDATE on the sequence
	FallbackNotSequence                           // the name does not resolve to a sequence
	FallbackStateUnknown                          // the session state could not be read then (no safe point, a failed hidden query)
	FallbackShimRunning                           // a statement that may issue IDs in the shim still runs
	FallbackDDLInTransaction                      // the transaction block ran DDL or set a sequence
	FallbackNodeConflict                          // another live proxy holds the node on the database
	FallbackNodeClaim                             // the node claim is not held for another reason
	FallbackLeaseFailed                           // the lease could not be taken
	FallbackCatalogUnwatched                      // DDL made elsewhere cannot be seen: INSERT defaults stay with the server
	FallbackRepeatableRead                        // INSERT defaults read in a REPEATABLE READ or SERIALIZABLE snapshot are not used
	FallbackParseDeclined                         // the rewriter left calls in the text (per-row calls, after a state change)
	FallbackDisabled                              // the server has no Snowflakes: no fast path at all
	numFallbacks
)

var fallbackNames = [numFallbacks]string{"", "failed_transaction", "read_only", "no_node", "no_shim", "no_usage", "not_a_sequence",
	"state_unknown", "shim_running", "ddl_in_transaction", "node_conflict", "node_claim", "lease_failed",
	"catalog_unwatched", "repeatable_read", "parse_declined", "disabled"}

func (f Fallback) String() string {
	if f < numFallbacks {
		return fallbackNames[f]
	}
	return fmt.Sprintf("fallback(%d)", f)
}

// FallbackNames returns the names of every Fallback, as Stats.Fallbacks
// keys them, so that a metrics exporter can show the reasons that never
// happened as 0.
func FallbackNames() []string {
	return append([]string(nil), fallbackNames[1:]...)
}

// FallbackClassifier may be implemented by a Snowflakes whose NextvalBatch
// and TryNextvalBatch errors tell why the fast path refused; 0 for an
// error it does not know. Without it every refusal is FallbackLeaseFailed.
type FallbackClassifier interface {
	FallbackOf(err error) Fallback
}

// fallbackOf classifies a refusal of Snowflakes.
func (p *clientPump) fallbackOf(err error) Fallback {
	if c, ok := p.cfg.Snowflakes.(FallbackClassifier); ok {
		if f := c.FallbackOf(err); f > 0 && f < numFallbacks {
			return f
		}
	}
	return FallbackLeaseFailed
}

// countFallback counts one statement execution whose IDs the shim issues
// (nothing for 0).
func (s *Server) countFallback(f Fallback) {
	if f > 0 && f < numFallbacks {
		s.stats.fallbacks[f].Add(1)
	}
}

// executionFallback is why the IDs of one execution of a statement go to
// the shim, or 0: the INSERT defaults the session could not take
// (insertTemplate), else the first Nextval slot left unfilled (values,
// with slotLeft from noteShimSlots), else calls the rewriter left in the
// text.
func (p *clientPump) executionFallback(defaults Fallback, slotLeft bool, pl *plan.Plan) Fallback {
	switch {
	case defaults != 0:
		return defaults
	case slotLeft:
		if p.slotFallback == 0 {
			return FallbackStateUnknown
		}
		return p.slotFallback
	case pl != nil && pl.ShimCalls:
		return FallbackParseDeclined
	}
	return 0
}
