package wire

import (
	"bytes"
	"testing"

	"github.com/snowflake-proxy/snowflake-proxy/rewrite/plan"
	"github.com/snowflake-proxy/snowflake-proxy/wire/netloop"
)

// idSession is a session whose mirror knows sequence s (INCREMENT 100) and
// may serve it on the fast path, with a fake generator.
func idSession(f *fakeSnowflakes) (*clientPump, *plan.Template) {
	ss := benchSession(false, bytes.NewReader(nil))
	ss.cfg.Snowflakes = f
	p := ss.cp
	p.mirror = mirror{fresh: true, node: 5, shim: true, seqs: map[string]seqInfo{"s": {oid: 16384, usable: true, inc: 100}}}
	s := plan.Slot{Op: plan.Nextval, Seq: "s", Arg: "'s'"}
	c := plan.Slot{Op: plan.Currval, Seq: "s", Arg: "'s'"}
	t := &plan.Template{Parts: []string{"SELECT ", ", ", ", ", ", ", ""}, Slots: []plan.Slot{s, s, c, s}}
	return p, t
}

// The fast-path IDs of one execution are issued as one batch, in slot
// order, and a currval after a nextval of the statement gets that value.
func TestValuesIssueOneBatch(t *testing.T) {
	f := &fakeSnowflakes{}
	p, tmpl := idSession(f)
	allValid, ok, _ := p.values(tmpl, false, true, false)
	if !allValid || !ok {
		t.Fatalf("values: allValid %v, ok %v", allValid, ok)
	}
	v := p.vals
	if !v[0].Valid || !v[1].Valid || !v[3].Valid || v[1].ID <= v[0].ID || v[3].ID <= v[1].ID {
		t.Fatalf("IDs not in slot order: %+v", v)
	}
	if !v[2].Valid || v[2].ID != v[1].ID {
		t.Fatalf("currval after the second call: %+v, want %d", v[2], v[1].ID)
	}
	if f.calls.Load() != 3 {
		t.Fatalf("%d IDs issued, want 3", f.calls.Load())
	}
}

// On the event loop's thread a batch that would wait hands the session
// over with no value left behind, and the retry on its goroutine issues
// the whole batch (the generator's TryNextBatch issues nothing then: before
// batches, a statement whose second call would have waited had issued its
// first, and the retry issued it again, so the client saw counts 1, 2, 3
// where one node gives 0, 1, 2).
func TestValuesOnLoopIssueAllOrNothing(t *testing.T) {
	f := &fakeSnowflakes{}
	f.wait.Store(true)
	p, tmpl := idSession(f)
	netloop.ForceInLoop(p.rel, true)
	if _, ok, err := p.values(tmpl, false, true, false); !ok || err != errHandover {
		t.Fatalf("values on the loop with a lease pending: ok %v, err %v; want a handover", ok, err)
	}
	if n := f.calls.Load(); n != 0 {
		t.Fatalf("%d IDs issued before the handover, want 0", n)
	}
	for i, v := range p.vals {
		if v.Valid {
			t.Fatalf("slot %d kept a value after the handover: %+v", i, v)
		}
	}
	netloop.ForceInLoop(p.rel, false)
	f.wait.Store(false)
	if allValid, _, _ := p.values(tmpl, false, true, false); !allValid || f.calls.Load() != 3 {
		t.Fatalf("retry: allValid %v, %d IDs issued, want 3", allValid, f.calls.Load())
	}
}

// Inside a transaction block that ran DDL the calls go to the shim: a lease
// would wait for that transaction's locks (regression: BEGIN; ALTER
// SEQUENCE ...; SELECT snowflake.nextval(...) hung). Outside one, or in
// a transaction without DDL, the fast path serves.
func TestValuesLeaveTransactionWithDDLToShim(t *testing.T) {
	for _, tc := range []struct {
		name    string
		status  byte
		pending plan.Touch
		fast    bool
	}{
		{"idle", 'I', 0, true},
		{"transaction", 'T', 0, true},
		{"transaction that set the node", 'T', plan.TouchNode, true},
		{"transaction with DDL", 'T', plan.TouchCatalog, false},
		{"transaction with setval", 'T', plan.TouchSequence, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakeSnowflakes{}
			p, tmpl := idSession(f)
			p.sh.txStatus, p.sh.pending = tc.status, tc.pending
			allValid, ok, _ := p.values(tmpl, false, true, false)
			if !ok || allValid != tc.fast || (f.calls.Load() == 3) != tc.fast {
				t.Fatalf("allValid %v, ok %v, %d IDs issued; want fast path %v", allValid, ok, f.calls.Load(), tc.fast)
			}
		})
	}
}

// After a statement that may have issued in the shim, the session's
// requests carry a fence ticket of their own, and keep it; another
// session's carry none. Before, the session fenced every sequence of the
// database for everyone, so that any role could make every other
// session wait for a lease renewal at will.
func TestFenceIsTheSessionsOwn(t *testing.T) {
	f := &fakeSnowflakes{}
	p, tmpl := idSession(f)
	other, otherTmpl := idSession(f)
	p.sh.fenceDue = plan.TouchShim
	if allValid, ok, _ := p.values(tmpl, false, true, false); !allValid || !ok {
		t.Fatal("fast path refused after the fence")
	}
	ticket := f.after.Load()
	if ticket == 0 || f.fences.Load() != 1 {
		t.Fatalf("requests after the fence carry ticket %d (%d fences), want the session's", ticket, f.fences.Load())
	}
	if allValid, _, _ := other.values(otherTmpl, false, true, false); !allValid || f.after.Load() != 0 {
		t.Fatalf("another session's requests carry ticket %d, want none", f.after.Load())
	}
	if allValid, _, _ := p.values(tmpl, false, true, false); !allValid || f.after.Load() != ticket || f.fences.Load() != 1 {
		t.Fatalf("the session's next requests carry ticket %d (%d fences), want %d, not fenced again", f.after.Load(), f.fences.Load(), ticket)
	}
}

// Issuing the IDs of a statement allocates nothing once the session's
// buffers are warm.
func TestValuesAllocateNothing(t *testing.T) {
	p, tmpl := idSession(&fakeSnowflakes{})
	p.values(tmpl, false, true, false)
	if n := testing.AllocsPerRun(200, func() {
		if allValid, ok, _ := p.values(tmpl, false, true, false); !allValid || !ok {
			t.Fatal("fast path refused")
		}
	}); n != 0 {
		t.Fatalf("%v allocations per execution, want 0", n)
	}
}

// Each refusal of the fast path names its reason (Stats.Fallbacks): the
// first check that fails, in the order values applies them.
func TestValuesNameTheFallback(t *testing.T) {
	for _, tc := range []struct {
		name  string
		setup func(p *clientPump, f *fakeSnowflakes)
		want  Fallback
	}{
		{"served", func(*clientPump, *fakeSnowflakes) {}, 0},
		{"failed transaction", func(p *clientPump, _ *fakeSnowflakes) { p.sh.txStatus = 'E' }, FallbackFailedTransaction},
		{"stale mirror", func(p *clientPump, _ *fakeSnowflakes) { p.mirror.fresh = false }, FallbackStateUnknown},
		{"unknown name", func(p *clientPump, _ *fakeSnowflakes) { delete(p.mirror.seqs, "s") }, FallbackStateUnknown},
		{"no shim", func(p *clientPump, _ *fakeSnowflakes) { p.mirror.shim = false }, FallbackNoShim},
		{"no node", func(p *clientPump, _ *fakeSnowflakes) { p.mirror.node = 0 }, FallbackNoNode},
		{"read only", func(p *clientPump, _ *fakeSnowflakes) { p.mirror.readOnly = true }, FallbackReadOnly},
		{"not a sequence", func(p *clientPump, _ *fakeSnowflakes) { p.mirror.seqs["s"] = seqInfo{} }, FallbackNotSequence},
		{"no usage", func(p *clientPump, _ *fakeSnowflakes) { p.mirror.seqs["s"] = seqInfo{oid: 16384, inc: 1} }, FallbackNoUsage},
		{"shim statement running", func(p *clientPump, _ *fakeSnowflakes) { p.sh.shimBusy = plan.TouchShim }, FallbackShimRunning},
		{"DDL in the transaction", func(p *clientPump, _ *fakeSnowflakes) {
			p.sh.txStatus, p.sh.pending = 'T', plan.TouchCatalog
		}, FallbackDDLInTransaction},
		// The fake classifies nothing: a refusal of Snowflakes counts as a
		// failed lease.
		{"refused by Snowflakes", func(_ *clientPump, f *fakeSnowflakes) { f.fail.Store(true) }, FallbackLeaseFailed},
		{"no Snowflakes", func(p *clientPump, _ *fakeSnowflakes) { p.cfg.Snowflakes = nil }, FallbackDisabled},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakeSnowflakes{}
			p, tmpl := idSession(f)
			tc.setup(p, f)
			allValid, _, _ := p.values(tmpl, false, true, false)
			if allValid != (tc.want == 0) || p.slotFallback != tc.want {
				t.Fatalf("allValid %v, fallback %v; want %v", allValid, p.slotFallback, tc.want)
			}
			if got := p.executionFallback(0, p.noteShimSlots(tmpl), nil); got != tc.want {
				t.Fatalf("execution fallback %v, want %v", got, tc.want)
			}
		})
	}
}

// A move of the privilege epoch (a role's membership revoked elsewhere)
// drops the session's sequence resolutions, which say whether its role
// may use each sequence, as a move of the catalog epoch does; an epoch
// that did not move keeps them (regression: the session kept using a
// sequence its role had lost).
func TestPrivilegeEpochDropsSequenceResolutions(t *testing.T) {
	f := &fakeSnowflakes{}
	p, _ := idSession(f)
	p.checkEpoch()
	if len(p.mirror.seqs) != 1 {
		t.Fatalf("%d resolutions with no epoch moved, want 1", len(p.mirror.seqs))
	}
	f.privs.Store(5)
	p.checkEpoch()
	if len(p.mirror.seqs) != 0 {
		t.Fatalf("%d resolutions after the privilege epoch moved, want 0", len(p.mirror.seqs))
	}
	p.mirror.seqs["s"] = seqInfo{oid: 16384, usable: true, inc: 1}
	p.checkEpoch()
	if len(p.mirror.seqs) != 1 {
		t.Fatal("a resolution made at the current epoch was dropped")
	}
}
