package coordtest

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/firnid/firn/coordinator"
	"github.com/firnid/firn/segment"
)

// The cases of a segment generator's counter (coordinator.Counters).

// CounterCases are the shared counter cases that are not fence cases.
func CounterCases() []Case {
	return []Case{
		{"CounterFirstRead", CounterFirstRead},
		{"CounterClaimsDisjoint", CounterClaimsDisjoint},
		{"CounterHandBack", CounterHandBack},
		{"CounterExhaustion", CounterExhaustion},
		{"CounterPinMismatch", CounterPinMismatch},
		{"CounterMarkerRefuses", CounterMarkerRefuses},
		{"CounterRolledBack", CounterRolledBack},
		{"CounterForked", CounterForked},
		{"CounterBump", CounterBump},
		{"CounterBumpRefused", CounterBumpRefused},
		{"CounterInvalid", CounterInvalid},
	}
}

// CounterSpec is a segment generator's spec for the cases.
func CounterSpec(generator string, start, max uint64) coordinator.CounterSpec {
	return coordinator.CounterSpec{Generator: generator, Definition: segment.Definition{Start: start, Max: max}}
}

func mustClaim(t testing.TB, c coordinator.Counters, spec coordinator.CounterSpec, n, above uint64, known segment.Mark) coordinator.Claim {
	t.Helper()
	cl, err := coordinator.ClaimSegment(ctxT(t, 10*time.Second), c, spec, n, above, known, 0)
	if err != nil {
		t.Fatalf("claim of %d: %v", n, err)
	}
	return cl
}

// CounterFirstRead: the first read pins the definition and creates the
// counter at its start; every client reads the same record.
func CounterFirstRead(t *testing.T, b Backend) {
	cl := b.NewCluster(t)
	c1, c2 := cl.Connect(t, sysClock), cl.Connect(t, sysClock)
	spec := CounterSpec("orders", 1000, segment.MaxID)
	r1, err := c1.ReadCounter(ctxT(t, 10*time.Second), spec)
	if err != nil {
		t.Fatal(err)
	}
	if r1.State.Next != 1000 || r1.State.Seq != 0 || len(r1.State.Free) != 0 {
		t.Fatalf("first read: %+v, want next 1000 seq 0", r1.State)
	}
	r2, err := c2.ReadCounter(ctxT(t, 10*time.Second), spec)
	if err != nil {
		t.Fatal(err)
	}
	if string(r2.Raw) != string(r1.Raw) || r2.Version != r1.Version {
		t.Fatalf("second client read %s (version %d), first %s (version %d)", r2.Raw, r2.Version, r1.Raw, r1.Version)
	}
	gs, err := c2.Generators(ctxT(t, 10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, g := range gs {
		if g.Name == "orders" && g.Pin.Layout == spec.Definition.String() {
			found = true
		}
	}
	if !found {
		t.Fatalf("Generators %+v lacks orders pinned to %q", gs, spec.Definition)
	}
}

// CounterClaimsDisjoint: claims from 8 clients at once, each client's
// claims increasing, are disjoint and leave no gap: together they are
// exactly [start, next), and seq counts them.
func CounterClaimsDisjoint(t *testing.T, b Backend) {
	cl := b.NewCluster(t)
	spec := CounterSpec("dense", 1, segment.MaxID)
	const clients, each = 8, 12
	var mu sync.Mutex
	var got []segment.Range
	var errs []error
	var wg sync.WaitGroup
	for i := range clients {
		c := cl.Connect(t, sysClock)
		wg.Go(func() {
			var above uint64
			var acked segment.Mark
			for j := range each {
				claim, err := coordinator.ClaimSegment(ctxT(t, 60*time.Second), c, spec, uint64(1+(i*each+j)%37), above, acked, 0)
				mu.Lock()
				if err != nil {
					errs = append(errs, fmt.Errorf("client %d claim %d: %w", i, j, err))
					mu.Unlock()
					return
				}
				got = append(got, claim.Range)
				mu.Unlock()
				if claim.Range.First < above {
					mu.Lock()
					errs = append(errs, fmt.Errorf("client %d: claim %v below its last %d", i, claim.Range, above))
					mu.Unlock()
				}
				above, acked = claim.Range.Last+1, claim.Record.State.Mark()
			}
		})
	}
	wg.Wait()
	if len(errs) > 0 {
		t.Fatalf("%d failures: %v", len(errs), errs)
	}
	slices.SortFunc(got, func(a, b segment.Range) int { return int(a.First) - int(b.First) })
	next := uint64(1)
	for _, r := range got {
		if r.First != next {
			t.Fatalf("claims %v: %v follows %d (overlap or gap)", got, r, next-1)
		}
		next = r.Last + 1
	}
	rec, err := cl.Connect(t, sysClock).ReadCounter(ctxT(t, 10*time.Second), spec)
	if err != nil {
		t.Fatal(err)
	}
	if rec.State.Next != next || rec.State.Seq != clients*each {
		t.Fatalf("counter %+v, want next %d seq %d", rec.State, next, clients*each)
	}
}

// CounterHandBack: a remainder handed back below other claims is given to
// the next claimer that claimed nothing before it; one ending at the
// counter lowers it; a hand-back of what was never claimed is refused.
func CounterHandBack(t *testing.T, b Backend) {
	cl := b.NewCluster(t)
	c := cl.Connect(t, sysClock)
	spec := CounterSpec("handback", 1, segment.MaxID)
	a := mustClaim(t, c, spec, 100, 0, segment.Mark{})
	b2 := mustClaim(t, c, spec, 100, 0, segment.Mark{})
	if a.Range != (segment.Range{First: 1, Last: 100}) || b2.Range != (segment.Range{First: 101, Last: 200}) {
		t.Fatalf("claims %v %v", a.Range, b2.Range)
	}
	ctx := ctxT(t, 10*time.Second)
	// The first claim used 1..40: its remainder goes back.
	if dropped, _, err := coordinator.HandBackSegment(ctx, c, spec, segment.Range{First: 41, Last: 100}, b2.Record.State.Mark()); err != nil || dropped != 0 {
		t.Fatalf("hand-back: %d dropped, %v", dropped, err)
	}
	// The second used 101..150: its remainder lowers the counter.
	_, rec, err := coordinator.HandBackSegment(ctx, c, spec, segment.Range{First: 151, Last: 200}, b2.Record.State.Mark())
	if err != nil {
		t.Fatal(err)
	}
	if rec.State.Next != 151 || !slices.Equal(rec.State.Free, []segment.Range{{First: 41, Last: 100}}) {
		t.Fatalf("after the hand-backs: %+v", rec.State)
	}
	// A claimer above 100 skips the free range; a new one takes it.
	if got := mustClaim(t, c, spec, 30, 151, rec.State.Mark()).Range; got != (segment.Range{First: 151, Last: 180}) {
		t.Fatalf("claim above 151: %v", got)
	}
	if got := mustClaim(t, c, spec, 30, 0, segment.Mark{}).Range; got != (segment.Range{First: 41, Last: 70}) {
		t.Fatalf("claim of a new node: %v, want the free range first", got)
	}
	if _, _, err := coordinator.HandBackSegment(ctx, c, spec, segment.Range{First: 500, Last: 600}, segment.Mark{}); !errors.Is(err, segment.ErrCounter) {
		t.Fatalf("hand-back of what was never claimed: %v, want segment.ErrCounter", err)
	}
}

// CounterExhaustion: the last claim is cut at max, the next refused with
// segment.ErrExhausted naming max; nothing is written by it.
func CounterExhaustion(t *testing.T, b Backend) {
	cl := b.NewCluster(t)
	c := cl.Connect(t, sysClock)
	spec := CounterSpec("small", 5, 14)
	mustClaim(t, c, spec, 6, 0, segment.Mark{})
	if got := mustClaim(t, c, spec, 6, 11, segment.Mark{}).Range; got != (segment.Range{First: 11, Last: 14}) {
		t.Fatalf("claim at max: %v, want [11, 14]", got)
	}
	_, err := coordinator.ClaimSegment(ctxT(t, 10*time.Second), c, spec, 1, 15, segment.Mark{}, 0)
	if !errors.Is(err, segment.ErrExhausted) || !strings.Contains(err.Error(), "max=14") || !strings.Contains(err.Error(), "small") {
		t.Fatalf("claim past max: %v, want ErrExhausted naming the generator and max=14", err)
	}
	rec, err := c.ReadCounter(ctxT(t, 10*time.Second), spec)
	if err != nil || rec.State.Next != 15 || rec.State.Seq != 2 {
		t.Fatalf("counter after the refusal: %+v %v", rec.State, err)
	}
}

// CounterPinMismatch: a second definition of one generator is refused
// naming both; so are a snowflake generator on a segment generator's
// name and the other way round.
func CounterPinMismatch(t *testing.T, b Backend) {
	cl := b.NewCluster(t)
	c := cl.Connect(t, sysClock)
	ctx := ctxT(t, 30*time.Second)
	first := CounterSpec("pinned", 1, segment.MaxID)
	if _, err := c.ReadCounter(ctx, first); err != nil {
		t.Fatal(err)
	}
	other := CounterSpec("pinned", 1, segment.JSMaxID)
	_, err := c.ReadCounter(ctx, other)
	var lm *coordinator.LayoutMismatchError
	if !errors.As(err, &lm) || lm.Pinned != first.Definition.String() || lm.Wanted != other.Definition.String() {
		t.Fatalf("another definition: %v, want LayoutMismatchError naming both", err)
	}
	if _, err := c.Acquire(ctx, Spec("pinned", 4), Node("snow")); !errors.As(err, &lm) || lm.Pinned != first.Definition.String() {
		t.Fatalf("a snowflake generator on a segment generator's name: %v, want LayoutMismatchError", err)
	}
	mustAcquire(t, c, Spec("snow", 4), Node("snow"))
	if _, err := c.ReadCounter(ctx, CounterSpec("snow", 1, segment.MaxID)); !errors.As(err, &lm) || lm.Pinned != Spec("snow", 4).Layout {
		t.Fatalf("a segment generator on a snowflake generator's name: %v, want LayoutMismatchError", err)
	}
}

// CounterMarkerRefuses: while a restore marker stands, reads and swaps
// are refused with the evidence.
func CounterMarkerRefuses(t *testing.T, b Backend) {
	cl := b.NewCluster(t)
	c := cl.Connect(t, sysClock)
	spec := CounterSpec("marked", 1, segment.MaxID)
	claim := mustClaim(t, c, spec, 10, 0, segment.Mark{})
	rb := &coordinator.CounterRolledBackError{Generator: spec.Generator, Seen: segment.Counter{Next: 1}, Known: claim.Record.State.Mark(), Cause: segment.ErrForked}
	ev := rb.Evidence(Node("witness"), time.Date(2026, 12, 5, 10, 0, 0, 0, time.UTC))
	if err := c.MarkRestored(ctxT(t, 10*time.Second), ev); err != nil {
		t.Fatal(err)
	}
	_, err := c.ReadCounter(ctxT(t, 10*time.Second), spec)
	wantRestored(t, err, ev)
	_, next, err := claim.Record.State.Claim(spec.Definition, 10, 11)
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.SwapCounter(ctxT(t, 10*time.Second), spec, claim.Record, next)
	wantRestored(t, err, ev)
}

// CounterRolledBack: a counter whose seq lies below the one a node saw
// acknowledged (written behind its back, or restored) is reported by the
// node's next claim and hand-back, and nothing is written.
func CounterRolledBack(t *testing.T, b Backend) {
	cl := b.NewCluster(t)
	c, behind := cl.Connect(t, sysClock), cl.Connect(t, sysClock)
	spec := CounterSpec("rolled", 1, segment.MaxID)
	mustClaim(t, c, spec, 10, 0, segment.Mark{})
	claim := mustClaim(t, c, spec, 10, 11, segment.Mark{})
	// Behind the node's back: the counter as it stood before both claims.
	rec, err := behind.ReadCounter(ctxT(t, 10*time.Second), spec)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := behind.SwapCounter(ctxT(t, 10*time.Second), spec, rec, segment.NewCounter(spec.Definition)); err != nil {
		t.Fatal(err)
	}
	_, err = coordinator.ClaimSegment(ctxT(t, 10*time.Second), c, spec, 10, 21, claim.Record.State.Mark(), 0)
	var rb *coordinator.CounterRolledBackError
	if !errors.As(err, &rb) || !errors.Is(err, coordinator.ErrRolledBack) || rb.Seen.Seq != 0 || rb.Known.Seq != 2 {
		t.Fatalf("claim after a rollback: %v, want CounterRolledBackError seen seq 0, acked 2", err)
	}
	if _, _, err := coordinator.HandBackSegment(ctxT(t, 10*time.Second), c, spec, segment.Range{First: 15, Last: 20}, claim.Record.State.Mark()); !errors.As(err, &rb) {
		t.Fatalf("hand-back after a rollback: %v, want CounterRolledBackError", err)
	}
	now, err := c.ReadCounter(ctxT(t, 10*time.Second), spec)
	if err != nil || now.State.Seq != 0 || now.State.Next != 1 {
		t.Fatalf("counter after the refusals: %+v %v, want it untouched", now.State, err)
	}
}

// CounterForked: a counter whose seq caught up with the one a node saw,
// but whose history holds another write at that seq (restored, then
// written on by others), is found by the node's periodic read
// (coordinator.ReadFollowing) and its next claim; a record that continues
// the node's history is not.
func CounterForked(t *testing.T, b Backend) {
	cl := b.NewCluster(t)
	c, other := cl.Connect(t, sysClock), cl.Connect(t, sysClock)
	spec := CounterSpec("forked", 1, segment.MaxID)
	mustClaim(t, c, spec, 10, 0, segment.Mark{})
	mine := mustClaim(t, c, spec, 10, 11, segment.Mark{})
	known := mine.Record.State.Mark()
	if known.ID == 0 || len(mine.Record.State.Hist) != 2 {
		t.Fatalf("a claim wrote no write ID: %+v", mine.Record.State)
	}
	// Writes by others continue the history.
	theirs := mustClaim(t, other, spec, 10, 0, segment.Mark{})
	if _, err := coordinator.ReadFollowing(ctxT(t, 10*time.Second), c, spec, known); err != nil {
		t.Fatalf("after another node's claim: %v", err)
	}
	// Behind the node's back: the counter as it stood after the first
	// claim, written on twice by another history (seq back at 3).
	rec, err := other.ReadCounter(ctxT(t, 10*time.Second), spec)
	if err != nil {
		t.Fatal(err)
	}
	fork := segment.Counter{Next: 11, Seq: 1, Hist: mine.Record.State.Hist[:1]}
	for range 2 {
		_, fork, _ = fork.Claim(spec.Definition, 5, 0)
		fork = fork.Stamp(coordinator.WriteID())
	}
	if _, err := other.SwapCounter(ctxT(t, 10*time.Second), spec, rec, fork); err != nil {
		t.Fatal(err)
	}
	var rb *coordinator.CounterRolledBackError
	if _, err := coordinator.ReadFollowing(ctxT(t, 10*time.Second), c, spec, known); !errors.As(err, &rb) || !errors.Is(rb.Cause, segment.ErrForked) || rb.Seen.Seq < known.Seq {
		t.Fatalf("read of a forked history at seq %d (node saw seq %d): %v, want CounterRolledBackError", fork.Seq, known.Seq, err)
	}
	if _, err := coordinator.ClaimSegment(ctxT(t, 10*time.Second), c, spec, 10, 21, known, 0); !errors.As(err, &rb) {
		t.Fatalf("claim on a forked history: %v, want CounterRolledBackError", err)
	}
	// The other node's memory of its own claim sees the fork too: its
	// write at seq 3 is not the one stored there now.
	if _, err := coordinator.ReadFollowing(ctxT(t, 10*time.Second), other, spec, theirs.Record.State.Mark()); !errors.As(err, &rb) {
		t.Fatalf("the other node's read: %v, want CounterRolledBackError", err)
	}
	ev := rb.Evidence(Node("witness"), time.Date(2026, 12, 5, 10, 0, 0, 0, time.UTC))
	if err := ev.Validate(); err != nil || !ev.Counter {
		t.Fatalf("evidence of a fork: %+v %v", ev, err)
	}
}

// CounterBump: a bump raises the counter's next and seq by the IDs given,
// drops the free ranges and clears the restore marker in one write; the
// nodes' memory of writes before it does not refuse the bumped counter,
// and claims continue above. A bump by 0, of a generator without a
// counter, or under another definition is refused.
func CounterBump(t *testing.T, b Backend) {
	cl := b.NewCluster(t)
	c := cl.Connect(t, sysClock)
	spec := CounterSpec("bumped", 1, segment.MaxID)
	first := mustClaim(t, c, spec, 100, 0, segment.Mark{})
	if _, _, err := coordinator.HandBackSegment(ctxT(t, 10*time.Second), c, spec, segment.Range{First: 11, Last: 50}, first.Record.State.Mark()); err != nil {
		t.Fatal(err)
	}
	second := mustClaim(t, c, spec, 100, 101, segment.Mark{})
	known := second.Record.State.Mark()
	rb := &coordinator.CounterRolledBackError{Generator: spec.Generator, Seen: segment.Counter{Next: 1}, Known: known, Cause: segment.ErrForked}
	ev := rb.Evidence(Node("witness"), time.Date(2026, 12, 5, 10, 0, 0, 0, time.UTC))
	if err := c.MarkRestored(ctxT(t, 10*time.Second), ev); err != nil {
		t.Fatal(err)
	}
	if _, err := c.BumpCounter(ctxT(t, 10*time.Second), spec, 0); !errors.Is(err, coordinator.ErrInvalidSpec) {
		t.Fatalf("bump by 0: %v, want ErrInvalidSpec", err)
	}
	if _, err := c.BumpCounter(ctxT(t, 10*time.Second), CounterSpec("never", 1, segment.MaxID), 10); !errors.Is(err, coordinator.ErrInvalidSpec) {
		t.Fatalf("bump of a generator without a counter: %v, want ErrInvalidSpec", err)
	}
	var lm *coordinator.LayoutMismatchError
	if _, err := c.BumpCounter(ctxT(t, 10*time.Second), CounterSpec("bumped", 1, segment.JSMaxID), 10); !errors.As(err, &lm) {
		t.Fatalf("bump under another definition: %v, want LayoutMismatchError", err)
	}
	res, err := c.BumpCounter(ctxT(t, 10*time.Second), spec, 1000)
	if err != nil {
		t.Fatal(err)
	}
	if res.Before.Next != 201 || res.After.Next != 1201 || res.After.Seq != res.Before.Seq+1000 || len(res.After.Free) != 0 ||
		res.Dropped != 40 || res.Cleared == nil || res.Cleared.Node.Name != "witness" || !res.Cleared.Counter {
		t.Fatalf("bump: %+v", res)
	}
	rec, err := coordinator.ReadFollowing(ctxT(t, 10*time.Second), c, spec, known)
	if err != nil {
		t.Fatalf("read after the bump, by a node that saw seq %d: %v", known.Seq, err)
	}
	if string(rec.Raw) != string(res.After.Encode()) {
		t.Fatalf("stored %s, bump reported %s", rec.Raw, res.After.Encode())
	}
	if got := mustClaim(t, c, spec, 10, 0, known).Range; got.First != 1201 {
		t.Fatalf("claim after the bump: %v, want from 1201", got)
	}
}

// CounterBumpRefused: a bump that does not lift next to what the restore
// marker's node saw (it would clear the marker with IDs handed out before
// the restore still to be claimed), or that would carry the counter's seq
// past 2^64-1, is refused naming --ids and the bound, and nothing is
// written: the marker stands. A bump by exactly what the marker asks
// clears it.
func CounterBumpRefused(t *testing.T, b Backend) {
	cl := b.NewCluster(t)
	c := cl.Connect(t, sysClock)
	spec := CounterSpec("bump-refused", 1, segment.MaxID)
	claim := mustClaim(t, c, spec, 100, 0, segment.Mark{}) // next 101
	known := claim.Record.State.Mark()
	known.Next = 501 // the noticing node saw claims up to 500 that the restore lost
	rb := &coordinator.CounterRolledBackError{Generator: spec.Generator, Seen: claim.Record.State, Known: known, Cause: segment.ErrForked}
	ev := rb.Evidence(Node("witness"), time.Date(2026, 12, 5, 10, 0, 0, 0, time.UTC))
	if err := c.MarkRestored(ctxT(t, 10*time.Second), ev); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		by   uint64
		want []string
	}{
		{399, []string{"--ids at least 400", "next 101 to 500", `node "witness" saw the counter at next 501`}},
		{math.MaxUint64, []string{"--ids 18446744073709551615", "at most 18446744073709551614"}},
	} {
		_, err := c.BumpCounter(ctxT(t, 10*time.Second), spec, tc.by)
		if !errors.Is(err, coordinator.ErrInvalidSpec) {
			t.Fatalf("bump by %d: %v, want ErrInvalidSpec", tc.by, err)
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Fatalf("bump by %d: %q does not say %q", tc.by, err, w)
			}
		}
		_, err = c.ReadCounter(ctxT(t, 10*time.Second), spec)
		wantRestored(t, err, ev) // nothing written: the marker stands
	}
	res, err := c.BumpCounter(ctxT(t, 10*time.Second), spec, 400)
	if err != nil || res.Before.Next != 101 || res.After.Next != 501 || res.Cleared == nil {
		t.Fatalf("bump by what the marker asks: %+v %v", res, err)
	}
	// Without a marker, any bump that keeps the seq within 2^64-1 lands.
	if res, err := c.BumpCounter(ctxT(t, 10*time.Second), spec, 1); err != nil || res.After.Next != 502 {
		t.Fatalf("bump by 1 without a marker: %+v %v", res, err)
	}
	rec, err := c.ReadCounter(ctxT(t, 10*time.Second), spec)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.BumpCounter(ctxT(t, 10*time.Second), spec, math.MaxUint64-rec.State.Seq+1); !errors.Is(err, coordinator.ErrInvalidSpec) {
		t.Fatalf("bump past seq 2^64-1 without a marker: %v, want ErrInvalidSpec", err)
	}
	if again, err := c.ReadCounter(ctxT(t, 10*time.Second), spec); err != nil || string(again.Raw) != string(rec.Raw) {
		t.Fatalf("after the refusal: %s %v, want %s", again.Raw, err, rec.Raw)
	}
}

// CounterInvalid: a bad name, definition or state is refused naming it,
// and nothing is written.
func CounterInvalid(t *testing.T, b Backend) {
	cl := b.NewCluster(t)
	c := cl.Connect(t, sysClock)
	ctx := ctxT(t, 10*time.Second)
	for _, spec := range []coordinator.CounterSpec{CounterSpec("", 1, 10), CounterSpec("a/b", 1, 10), CounterSpec("bad", 10, 10)} {
		if _, err := c.ReadCounter(ctx, spec); !errors.Is(err, coordinator.ErrInvalidSpec) {
			t.Errorf("ReadCounter(%+v): %v, want ErrInvalidSpec", spec, err)
		}
	}
	spec := CounterSpec("valid", 1, 100)
	rec, err := c.ReadCounter(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.SwapCounter(ctx, spec, rec, segment.Counter{Next: 500, Seq: 1})
	if !errors.Is(err, coordinator.ErrInvalidSpec) || !strings.Contains(err.Error(), "next 500") {
		t.Fatalf("a counter past max: %v, want ErrInvalidSpec naming next", err)
	}
	if again, err := c.ReadCounter(ctx, spec); err != nil || string(again.Raw) != string(rec.Raw) {
		t.Fatalf("after the refusal: %s %v, want %s", again.Raw, err, rec.Raw)
	}
}

// FenceCounter (a fence case): two writers read the same counter; the
// first write lands, the second is refused with ErrCounterMoved and the
// record now stored, so their claims cannot overlap. A write that does not
// compare what it read lets both land, claiming the same IDs twice.
func FenceCounter(t *testing.T, b Backend) {
	cl := b.NewCluster(t)
	c1, c2 := cl.Connect(t, sysClock), cl.Connect(t, sysClock)
	spec := CounterSpec("fence-counter", 1, segment.MaxID)
	ctx := ctxT(t, 10*time.Second)
	r1, err := c1.ReadCounter(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	r2, err := c2.ReadCounter(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	a, nextA, _ := r1.State.Claim(spec.Definition, 100, 0)
	_, nextB, _ := r2.State.Claim(spec.Definition, 50, 0)
	written, err := c1.SwapCounter(ctx, spec, r1, nextA)
	if err != nil {
		t.Fatalf("first write: %v", err)
	}
	now, err := c2.SwapCounter(ctx, spec, r2, nextB)
	if !errors.Is(err, coordinator.ErrCounterMoved) {
		t.Fatalf("second write from the same read: %v, want ErrCounterMoved (both claimed from %d)", err, a.First)
	}
	if now.State.Next != 101 || string(now.Raw) != string(written.Raw) {
		t.Fatalf("the refusal returned %+v, want the first write's record (next 101)", now.State)
	}
	// The retry from what the refusal returned claims above the first.
	b2, nextB, _ := now.State.Claim(spec.Definition, 50, 0)
	if _, err := c2.SwapCounter(ctx, spec, now, nextB); err != nil || b2.First != 101 {
		t.Fatalf("retry: %v %v", b2, err)
	}
}

// FenceLeaseCounterRestore (a fence case of the restore half, run under
// build tag firn_weakfence_lease): a restore that reuses revision numbers
// gives a counter written after it the version of one read before it.
// Writer A claims after the snapshot and keeps the record it wrote; the
// coordinator is restored; writer B claims, and the counter it writes
// carries A's version with other contents. A's next write, from its
// record, must be refused (ErrCounterMoved): it would claim IDs B holds.
// A fence that compares the version alone lets it land. snapshot and
// restore act on the coordinator behind pre, a and b, which are clients
// of their own; a's writes are retried while they find the coordinator
// unavailable (reconnecting to the restored one).
func FenceLeaseCounterRestore(t *testing.T, pre, a, b coordinator.Counters, snapshot, restore func()) {
	spec := CounterSpec("fence-counter-restore", 1, segment.MaxID)
	if _, err := pre.ReadCounter(ctxT(t, 20*time.Second), spec); err != nil {
		t.Fatal(err)
	}
	snapshot()
	ca := mustClaim(t, a, spec, 10, 0, segment.Mark{})
	restore()
	cb := mustClaim(t, b, spec, 20, 0, segment.Mark{})
	if cb.Record.Version != ca.Record.Version || string(cb.Record.Raw) == string(ca.Record.Raw) {
		t.Fatalf("the premise does not hold: A wrote %s at version %d, B %s at version %d; want the same version, other contents",
			ca.Record.Raw, ca.Record.Version, cb.Record.Raw, cb.Record.Version)
	}
	_, next, err := ca.Record.State.Claim(spec.Definition, 30, ca.Range.Last+1)
	if err != nil {
		t.Fatal(err)
	}
	for try := 0; ; try++ {
		_, err = a.SwapCounter(ctxT(t, 10*time.Second), spec, ca.Record, next)
		if !errors.Is(err, coordinator.ErrUnavailable) || try == 60 {
			break
		}
		time.Sleep(250 * time.Millisecond)
	}
	if !errors.Is(err, coordinator.ErrCounterMoved) {
		t.Fatalf("A's write from its record after the restore, against B's counter of the same version: %v, want ErrCounterMoved (B holds %v, A would claim from %d)",
			err, cb.Range, ca.Range.Last+1)
	}
}
