package sim

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand"
	"slices"
	"strings"
	"time"

	"github.com/firnid/firn/clockguard"
	"github.com/firnid/firn/coordinator"
	"github.com/firnid/firn/coordinator/memory"
	"github.com/firnid/firn/generator"
	"github.com/firnid/firn/segment"
	"github.com/firnid/firn/segment/source"
	"github.com/firnid/firn/server/admission"
	"github.com/firnid/firn/server/core"
)

// The segment generator. Every node serves, beside its snowflake
// generator, a segment generator (segName: dense IDs from a counter the
// coordinator keeps, docs/design.md "Segment counters (dense IDs)"), and
// callers of their own draw from it: NextIDs and NextRange, whose runs are
// checked as they come. Its IDs are an ID space of their own: every one
// unique across all nodes and all time, within the definition, increasing
// per caller on one node process. Its refusals name a cause its serving
// state held, never a clock cause (clock faults never stop a segment
// generator). At the end, once every node has stopped, the counter's
// figures add up: the IDs the counter advanced by are those the callers
// received, those in its free ranges, and those lost by node processes
// that ended without handing them back — each process's loss is what its
// source held unused (source.Stats), plus the claims whose replies were
// lost on the way.
//
// The counters live in a memory store of their own (world.cstore),
// faulted as the main one is, frozen and killed with each node, so that a
// coordinator restore can leave them out (segmentRestores) and every
// snowflake seed's coordinator runs as it did before the segment
// generator came.

// segmentRestores makes a coordinator restore of the schedule restore the
// counters too (to a snapshot taken with the main store's), with the
// operator's bump raising the counter by what was claimed since (the
// counter's Bump). Off: restores leave the counters alone. On, the nodes
// must find every restore (write IDs in the record, reads every second, a
// claim settling before use) and never hand out an ID twice.
const segmentRestores = true

// segHandBackFailed is what a node logs (Warn) when its segment
// generator's graceful stop could not hand every remainder back
// (server/core/segment.go).
const segHandBackFailed = "segment remainders not all handed back; they are skipped"

// Bugs the segment checks found in the node (server/core/segment.go,
// segment/source), fixed since: each const, when true, excuses exactly
// that bug's signature (to replay it on a build that has it).
const (
	// segBugRefusalReason: a take the source refuses for lack of IDs
	// after a failed claim is refused by segmentRuns with Reason
	// err.Error(), while the state it sets for that refusal holds
	// "segment claim failed: " + err.Error(): the refusal names a reason
	// the state never held. (The same path refuses a restore the claim
	// noticed, when it comes before the source's own notice, with code
	// COORDINATOR_UNAVAILABLE where the state holds RESTORE_DETECTED;
	// not excused, and not seen in 300 seeds with segmentRestores.)
	segBugRefusalReason = false
	// segBugStuckAfterFailedTake: a take larger than what the source
	// holds, refused because the last claim failed, leaves the
	// generator not serving for good: segmentRuns sets the state, every
	// later call is refused before it reaches the source, and the
	// source, holding more than its low-water mark and with no take
	// waiting, never claims again, so no landed claim clears it. The
	// settle excuses a generator not serving COORDINATOR_UNAVAILABLE
	// while its source holds IDs.
	segBugStuckAfterFailedTake = false
	// segBugClaimTimeoutAsDeadline: a take refused because the last
	// claim timed out (the claim's own context, "… the last claim
	// failed: …: context deadline exceeded") is returned by segmentRuns
	// as the error itself, at once: the caller sees its deadline
	// exceeded (DEADLINE_EXCEEDED) long before its deadline, with no
	// cause.
	segBugClaimTimeoutAsDeadline = false
)

// segName is the segment generator's name; every violation of a segment
// check names it (kindOf files them apart).
const segName = "orders"

// segDefinition draws the run's segment definition from a source of its
// own: half the seeds the default (1 to MaxID), some with another start,
// some with a max the run may use up (in the middle of the space, at
// MaxID, at 2^53 − 1).
func segDefinition(seed int64) segment.Definition {
	r := rand.New(rand.NewSource(seed*104723 + 61))
	d := segment.Default()
	switch k := r.Intn(8); {
	case k < 4:
	case k < 6:
		d.Start = 2 + uint64(r.Int63n(1<<40))
	case k == 6:
		d.Start = 1000 + uint64(r.Intn(1_000_000))
		d.Max = d.Start + []uint64{150_000, 1_500_000, 40_000_000}[r.Intn(3)] - 1
	default:
		d.Max = []uint64{segment.MaxID, segment.JSMaxID}[r.Intn(2)]
		d.Start = d.Max - []uint64{3_000_000, 30_000_000}[r.Intn(2)]
	}
	if err := d.Validate(); err != nil {
		panic(err)
	}
	return d
}

func (w *world) segSpec() coordinator.CounterSpec {
	return coordinator.CounterSpec{Generator: segName, Definition: w.segDef}
}

// consumed is how many IDs of the definition the counter c no longer
// offers: those below Next, less those in its free ranges.
func (w *world) consumed(c segment.Counter) uint64 {
	return c.Next - w.segDef.Start - c.FreeLen()
}

// --- the coordinator the nodes see ----------------------------------------

// simCoord is a node's coordinator: its client of the main store, whose
// counter calls (and the segment generator's restore marker) go to its
// client of the counter store instead, and whose calls for the sequence
// generator (its leases, slots, counter and marker) go to its client of
// the sequence store (seqs.go). Every segment counter write passes
// through SwapCounter, which records it in the world's ledger.
type simCoord struct {
	*memory.Client
	counters *memory.Client
	seqs     *memory.Client
	w        *world
	who      string // the node life
}

func (c *simCoord) ReadCounter(ctx context.Context, spec coordinator.CounterSpec) (coordinator.CounterRecord, error) {
	if spec.Generator == seqName {
		return c.seqs.ReadCounter(ctx, spec)
	}
	return c.counters.ReadCounter(ctx, spec)
}

func (c *simCoord) SwapCounter(ctx context.Context, spec coordinator.CounterSpec, prev coordinator.CounterRecord, next segment.Counter) (coordinator.CounterRecord, error) {
	if spec.Generator == seqName {
		c.w.seqLedger(next)
		return c.seqs.SwapCounter(ctx, spec, prev, next)
	}
	rec, err := c.counters.SwapCounter(ctx, spec, prev, next)
	c.w.ledger(c.who, prev, next, err)
	return rec, err
}

func (c *simCoord) MarkRestored(ctx context.Context, ev coordinator.RestoreEvidence) error {
	switch ev.Generator {
	case segName:
		return c.counters.MarkRestored(ctx, ev)
	case seqName:
		return c.seqs.MarkRestored(ctx, ev)
	}
	return c.Client.MarkRestored(ctx, ev)
}

func (c *simCoord) Acquire(ctx context.Context, spec coordinator.Spec, node coordinator.NodeInfo) (coordinator.Lease, error) {
	if spec.Generator != seqName {
		return c.Client.Acquire(ctx, spec, node)
	}
	c.w.seq.mu.Lock()
	epoch := c.w.seq.restores
	c.w.seq.mu.Unlock()
	l, err := c.seqs.Acquire(ctx, spec, node)
	if err != nil {
		return nil, err
	}
	sl := &seqLease{Lease: l, w: c.w, node: node, epoch: epoch}
	c.w.seqLeased(sl)
	return sl, nil
}

func (c *simCoord) Workers(ctx context.Context, generator string) ([]coordinator.SlotState, error) {
	if generator == seqName {
		return c.seqs.Workers(ctx, generator)
	}
	return c.Client.Workers(ctx, generator)
}

// swapRec is one counter write a node (or the operator) asked for.
type swapRec struct {
	who        string
	prev, next string // the stored forms (the memory store compares them whole)
	state      segment.Counter
	delta      uint64 // consumed(next) − consumed(prev), modulo 2^64
	// acked: the write was acknowledged; else its outcome is unknown (an
	// error that may follow the write: a lost reply, a client closed
	// after it), and the counter's history tells.
	acked bool
}

// ledger records a counter write: acknowledged, or of unknown outcome.
// Writes refused before they were applied (the counter moved, a marker
// stands, an invalid record) are left out.
func (w *world) ledger(who string, prev coordinator.CounterRecord, next segment.Counter, err error) {
	var restored *coordinator.RestoredError
	if errors.Is(err, coordinator.ErrCounterMoved) || errors.As(err, &restored) || errors.Is(err, coordinator.ErrInvalidSpec) {
		return
	}
	rec := swapRec{who: who, prev: string(prev.Raw), next: string(next.Encode()), state: next,
		delta: w.consumed(next) - w.consumed(prev.State), acked: err == nil}
	w.mu.Lock()
	w.swaps = append(w.swaps, rec)
	w.mu.Unlock()
}

// --- the callers ------------------------------------------------------------

// segLife is what one node process did with the segment generator.
type segLife struct {
	key      string // node/life
	graceful bool
	received uint64 // IDs its callers received
	ended    bool
	stats    segStats
	// warned: the node said it could not hand all its remainders back.
	warned bool
}

// segStats are the source's figures at the process's end.
type segStats struct {
	claimed, issued, handedBack, dropped uint64
	adopted                              uint64 // claims whose reply was lost, found landed and taken
}

// segCaller asks its node's segment generator for IDs until stop,
// checking every answer: mostly NextIDs and NextRange of 1 to 1000 IDs
// (4096 in a burst), now and then max_batch, a NextRange of up to a
// million, or max_range.
func (n *node) segCaller(id string, nc *core.Core, hist *stateLog, stop <-chan struct{}, life *segLife) {
	defer n.callers.Done()
	w := n.w
	h := fnv.New64a()
	h.Write([]byte(id))
	rng := rand.New(rand.NewSource(w.o.Seed*999983 ^ int64(h.Sum64()>>1)))
	st, err := nc.Status(segName)
	if err != nil {
		w.violate("%s: Status: %v", id, err)
		return
	}
	maxBatch, maxRange := st.MaxBatch, st.MaxRange
	var last uint64 // the caller's last ID (0: none yet; no definition starts at 0)
	var buf []uint64
	var runs []keyRun // reused
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	for {
		n.mu.Lock()
		paused, burst, frozen := n.paused, n.burst, n.frozen
		n.mu.Unlock()
		pause := time.Duration(100+rng.Intn(900)) * time.Millisecond
		if paused || frozen {
			pause = 500 * time.Millisecond
		}
		t.Reset(pause)
		select {
		case <-stop:
			return
		case <-t.C:
		}
		if paused || frozen {
			continue
		}
		count := uint64([]int{1, 1, 10, 100, 1000}[rng.Intn(5)])
		if burst {
			count = 4096
		}
		ranged := rng.Intn(3) == 0
		switch k := rng.Intn(600); {
		case k == 0:
			count, ranged = uint64(maxBatch), false
		case k == 1:
			count, ranged = 1+uint64(rng.Intn(maxBatch)), false
		case k == 2:
			count, ranged = maxRange, true
		case k < 5:
			count, ranged = 1+uint64(rng.Intn(1_000_000)), true
		}
		mark := hist.mark()
		pre, err := nc.StateSnapshot(segName)
		if err != nil {
			w.violate("%s: StateSnapshot of %s: %v", id, segName, err)
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), callDeadline)
		began := time.Now()
		runs = runs[:0]
		if ranged {
			var got []generator.Run
			got, err = nc.NextRange(ctx, segName, count)
			for _, r := range got {
				if r.Count == 0 {
					w.violate("%s: %s: an empty run at %d", id, segCall(ranged, count), r.First)
					continue
				}
				runs = append(runs, keyRun{first: r.First, last: r.First + r.Count - 1, who: id})
			}
		} else {
			if uint64(cap(buf)) < count {
				buf = make([]uint64, count)
			}
			dst := buf[:count]
			if err = nc.NextIDs(ctx, segName, dst); err == nil {
				for i, x := range dst {
					if i > 0 && x == dst[i-1]+1 {
						runs[len(runs)-1].last = x
						continue
					}
					runs = append(runs, keyRun{first: x, last: x, who: id})
				}
			}
		}
		took := time.Since(began)
		cancel()
		n.mu.Lock()
		frozenNow, upNow := n.frozen, n.up
		n.mu.Unlock()
		w.mu.Lock()
		w.calls++
		w.mu.Unlock()
		if err != nil {
			n.checkSegRefusal(refusal{who: id, what: segCall(ranged, count), err: err, took: took, frozen: frozenNow || frozen, up: upNow,
				bound: answerBound, core: nc, hist: hist, pre: entryOf(pre), mark: mark})
			continue
		}
		if took > answerBound && !frozenNow {
			w.violate("%s: %s answered after %v (bound %v)", id, segCall(ranged, count), took, answerBound)
		}
		last = w.segReceived(id, ranged, last, count, runs, life)
	}
}

// segCall names a call of the segment generator, for a violation.
func segCall(ranged bool, count uint64) string {
	if ranged {
		return fmt.Sprintf("%s NextRange(%d)", segName, count)
	}
	return fmt.Sprintf("%s NextIDs(%d)", segName, count)
}

// segReceived checks and records one answer of segment caller id: count
// IDs, within the definition, each run above the caller's last ID, none
// issued before; it returns the new last.
func (w *world) segReceived(id string, ranged bool, last, count uint64, runs []keyRun, life *segLife) uint64 {
	var got uint64
	bad := false
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, r := range runs {
		got += r.last - r.first + 1
		if r.first <= last && !bad {
			bad = true
			w.violateLocked("%s: %s: run %d..%d after ID %d (not increasing per caller)", id, segCall(ranged, count), r.first, r.last, last)
		}
		last = max(last, r.last)
		if r.first < w.segDef.Start || r.last > w.segDef.Max {
			w.violateLocked("%s: %s: IDs %d..%d outside the definition %s", id, segCall(ranged, count), r.first, r.last, w.segDef)
		}
		var prev keyRun
		var dup bool
		if w.segIssued, prev, dup = insertKeyRun(w.segIssued, r); dup {
			w.violateLocked("%s IDs %d..%d issued twice: to %s and again to %s", segName,
				max(r.first, prev.first), min(r.last, prev.last), prev.who, id)
		}
	}
	if got != count {
		w.violateLocked("%s: %s returned %d IDs", id, segCall(ranged, count), got)
	}
	w.segIDs += got
	life.received += got
	return last
}

// segCodes are the causes a segment generator's state may hold; the
// clock's causes are not among them.
var segCodes = []clockguard.Code{clockguard.CodeStarting, clockguard.CodeCoordinatorUnavailable,
	clockguard.CodeReservationExhausted, clockguard.CodeRestoreDetected, clockguard.CodeDraining}

// clockCodes are the clock's causes: none may stop a segment generator.
var clockCodes = []clockguard.Code{clockguard.CodeClockRollback, clockguard.CodeClockStep, clockguard.CodeClockRange,
	clockguard.CodeNTPOffset, clockguard.CodeNTPUnreachable, clockguard.CodePeerSkew, clockguard.CodeClockUnchecked,
	clockguard.CodeOperatorHold}

// checkSegState is told each state the segment generator's serving state
// records: none may hold a clock cause, nor one a segment generator
// cannot have.
func (n *node) checkSegState(e stateEntry) {
	for _, c := range e.causes {
		switch {
		case slices.Contains(clockCodes, c.Code):
			n.w.violate("%s: %s held for a clock cause %s: %q", n.name, segName, c.Code, e.reason)
		case !slices.Contains(segCodes, c.Code):
			n.w.violate("%s: %s held for %s, not a cause of a segment generator: %q", n.name, segName, c.Code, e.reason)
		}
	}
}

// checkSegRefusal checks a failed call of the segment generator: refused
// at once, naming a cause its state held during the call, never a clock
// cause; never as overloaded (a segment generator queues nothing), a bad
// request for a size Info advertises, or after running to its deadline.
func (n *node) checkSegRefusal(r refusal) {
	w := n.w
	w.mu.Lock()
	w.refused++
	w.mu.Unlock()
	if r.frozen || !r.up {
		return // a stopped process's calls say nothing
	}
	id, err := r.who, r.err
	var ns *core.NotServingError
	var ov *admission.OverloadedError
	var bad *core.RequestError
	switch {
	case errors.As(err, &ns):
		switch {
		case strings.TrimSpace(ns.Reason) == "":
			w.violate("%s: %s refused without a cause: %v", id, r.what, err)
		case slices.Contains(clockCodes, ns.Code):
			w.violate("%s: %s refused naming a clock cause %s: %v", id, r.what, ns.Code, err)
		case !slices.Contains(segCodes, ns.Code):
			w.violate("%s: %s refused with code %q, not a cause of a segment generator: %v", id, r.what, ns.Code, err)
		}
		if segBugRefusalReason && ns.Code == clockguard.CodeCoordinatorUnavailable {
			r.alt = func(reason string) string { return "segment claim failed: " + reason }
		}
		n.checkHeld(r, ns)
	case errors.Is(err, generator.ErrRollback), errors.Is(err, generator.ErrForwardStep),
		errors.Is(err, generator.ErrClockRange), errors.Is(err, generator.ErrAhead):
		w.violate("%s: %s refused naming a clock cause: %v", id, r.what, err)
	case errors.Is(err, context.DeadlineExceeded) && r.took >= callDeadline:
		w.violate("%s: %s: a call ran to its deadline (%v): %v", id, r.what, r.took, err)
	case errors.Is(err, context.DeadlineExceeded):
		if segBugClaimTimeoutAsDeadline && strings.Contains(err.Error(), "the last claim failed") {
			break
		}
		w.violate("%s: %s refused as its deadline exceeded after %v, its deadline not reached: %v", id, r.what, r.took, err)
	case errors.As(err, &ov):
		// A segment generator queues nothing; a call for more IDs than the
		// node holds waits for a claim, and is refused as overloaded, its
		// wait (the settle and the coordinator's latency) as the retry
		// delay, when its deadline falls before the claim is usable or
		// while claims fail; one that waited longer than estimated gives
		// up just before its deadline, the same way.
		// A definition used up names its cause and offers no retry: none
		// would serve the call.
		usedUp := ov.Cause == string(clockguard.CodeReservationExhausted)
		if ov.Detail == "" || (ov.RetryAfter <= 0 && !usedUp) || ov.RetryAfter > source.DefaultSettle+10*time.Second || r.took >= callDeadline {
			w.violate("%s: %s refused as overloaded (a segment generator queues nothing) after %v: %v", id, r.what, r.took, err)
		}
		if strings.Contains(ov.Detail, segment.ErrExhausted.Error()) != usedUp {
			w.violate("%s: %s refused with cause %q for a definition used up (RESERVATION_EXHAUSTED only and always): %v", id, r.what, ov.Cause, err)
		}
	case errors.As(err, &bad):
		w.violate("%s: %s refused as a bad request, a size Info advertises: %v", id, r.what, err)
	default:
		w.violate("%s: %s refused with an error naming no cause: %v", id, r.what, err)
	}
	if r.took > r.bound {
		w.violate("%s: %s refused only after %v: %v", id, r.what, r.took, err)
	}
}

// --- ends of processes, the settle and the accounting ----------------------

// segEnded records the end of a node process's segment generator: its
// source's figures once stopped, and whether it stopped gracefully.
func (w *world) segEnded(life *segLife, nc *core.Core, graceful, warned bool) {
	st, err := nc.Status(segName)
	w.mu.Lock()
	defer w.mu.Unlock()
	life.ended, life.graceful, life.warned = true, graceful, warned
	if err != nil || st.Segment == nil {
		w.violateLocked("%s: %s: no source figures at its end: %v", life.key, segName, err)
		return
	}
	s := st.Segment
	life.stats = segStats{claimed: s.Claimed, issued: s.Issued, handedBack: s.HandedBack, dropped: s.Dropped, adopted: s.Adopted}
}

// segSettled reports whether the node's segment generator may stay out
// of service once every fault ended: used up, or stopped for good by a
// restore it noticed (a source that noticed one claims no more; only a
// new process serves after the bump).
func (w *world) segSettled(nc *core.Core) (ok bool, why string) {
	st, err := nc.Status(segName)
	if err != nil {
		return false, err.Error()
	}
	if st.Serving {
		return true, ""
	}
	switch st.Cause {
	case clockguard.CodeReservationExhausted:
		return true, ""
	case clockguard.CodeCoordinatorUnavailable:
		if segBugStuckAfterFailedTake && st.Segment != nil && st.Segment.Available > 0 {
			return true, ""
		}
	case clockguard.CodeRestoreDetected:
		w.mu.Lock()
		restored := w.segRestored > 0
		w.mu.Unlock()
		return restored, st.Reason
	}
	return false, st.Reason
}

// segAccount checks, once every node has stopped, that the counter's
// figures add up. The IDs the counter advanced by (next − start), less
// those in its free ranges, are those consumed; of them the callers
// received some, and the rest were lost: each ended process lost what it
// claimed and neither handed out nor handed back (its source's figures),
// and claims written whose replies never came (the ledger's writes of
// unknown outcome that the counter's history holds) lost theirs. A
// process that stopped gracefully lost only what its hand-back dropped
// (the free list full), unless it said the hand-back failed; each process
// handed out what its callers received. The counter's history is read
// back from the ledger: from the record stored at the end, each record's
// write back to the counter's first. With segment restores on and a
// restore made, the history forks and the figures do not add up; then
// only the record is shown.
func (w *world) segAccount() {
	admin := w.cstore.Connect(w.base)
	defer admin.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	final, err := admin.ReadCounter(ctx, w.segSpec())
	w.mu.Lock()
	defer w.mu.Unlock()
	if err != nil {
		if w.segRestored > 0 {
			w.trace = append(w.trace, fmt.Sprintf("%9v  %s: counter at the end: %v", w.since(), segName, err))
			return
		}
		w.violateLocked("%s: the counter cannot be read at the end: %v", segName, err)
		return
	}
	c := final.State
	consumed := w.consumed(c)
	w.trace = append(w.trace, fmt.Sprintf("%9v  %s: counter at the end: next %d (advanced %d), seq %d, %d free in %d ranges; %d IDs received, %d counter writes asked",
		w.since(), segName, c.Next, c.Next-w.segDef.Start, c.Seq, c.FreeLen(), len(c.Free), w.segIDs, len(w.swaps)))
	if w.segRestored > 0 {
		return
	}
	// The history: from the record stored, each one's write, back to the
	// counter's first record.
	first := string(segment.NewCounter(w.segDef).Encode())
	byNext := map[string][]int{}
	for i, s := range w.swaps {
		byNext[s.next] = append(byNext[s.next], i)
	}
	inHistory := make([]bool, len(w.swaps))
	var unacked uint64       // consumed by writes whose replies never came
	var unackedClaims uint64 // by those of them that consumed (claims, not hand-backs)
	for cur, steps := string(final.Raw), 0; cur != first; steps++ {
		idx := byNext[cur]
		if len(idx) == 0 || steps > len(w.swaps) {
			w.violateLocked("%s accounting: the counter record %s was written by no node (nor by the operator)", segName, cur)
			return
		}
		k := idx[0]
		for _, i := range idx {
			if w.swaps[i].acked {
				k = i
				break
			}
		}
		inHistory[k] = true
		if !w.swaps[k].acked {
			unacked += w.swaps[k].delta
			if w.swaps[k].delta < 1<<63 {
				unackedClaims += w.swaps[k].delta
			}
		}
		cur = w.swaps[k].prev
	}
	for i, s := range w.swaps {
		if s.acked && !inHistory[i] {
			w.violateLocked("%s accounting: a counter write acknowledged to %s (seq %d, next %d) is not in the counter's history", segName, s.who, s.state.Seq, s.state.Next)
		}
	}
	var held uint64 // lost by the processes that ended
	var adopted uint64
	for _, l := range w.segLives {
		adopted += l.stats.adopted
		if !l.ended {
			w.violateLocked("%s accounting: %s never ended", segName, l.key)
			continue
		}
		s := l.stats
		if s.issued != l.received {
			w.violateLocked("%s accounting: %s handed out %d IDs; its callers received %d", segName, l.key, s.issued, l.received)
		}
		if s.issued+s.handedBack > s.claimed {
			w.violateLocked("%s accounting: %s handed out %d IDs and handed back %d, more than the %d it claimed", segName, l.key, s.issued, s.handedBack, s.claimed)
		}
		kept := s.claimed - s.issued - s.handedBack
		if l.graceful && !l.warned && kept != s.dropped {
			w.violateLocked("%s accounting: %s stopped gracefully and lost %d IDs, %d of them dropped by the free list (claimed %d, handed out %d, handed back %d) without saying a hand-back failed",
				segName, l.key, kept, s.dropped, s.claimed, s.issued, s.handedBack)
		}
		held += kept
	}
	lost := consumed - w.segIDs
	if adopted > unackedClaims {
		w.violateLocked("%s accounting: the nodes took %d IDs of claims in doubt as landed; unacknowledged claims in the counter's history hold %d", segName, adopted, unackedClaims)
	}
	// A claim found landed is its process's (in held, or received); an
	// unacknowledged hand-back that landed returned IDs its process counts
	// as kept (its delta is negative, modulo 2^64).
	unacked -= adopted
	if lost != held+unacked {
		w.violateLocked("%s accounting: the counter advanced %d with %d free: %d IDs consumed, %d received by callers, so %d lost; but the processes that ended held %d unused and unacknowledged claims took %d",
			segName, c.Next-w.segDef.Start, c.FreeLen(), consumed, w.segIDs, int64(lost), held, int64(unacked))
	}
	w.trace = append(w.trace, fmt.Sprintf("%9v  %s: %d lost: %d held unused by processes that ended, %d by unacknowledged claims",
		w.since(), segName, int64(lost), held, int64(unacked)))
}

// --- restores and the operator's bump --------------------------------------

// bumpCounterMarker bumps the counter once more when its marker stands
// (a node noticed the restore after the first bump).
func (w *world) bumpCounterMarker() {
	admin := w.cstore.Connect(w.base)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	gens, err := admin.Generators(ctx)
	cancel()
	admin.Close()
	if err != nil {
		w.note("%s: generators: %v", segName, err)
		return
	}
	for _, g := range gens {
		if g.Name == segName && g.Restore != nil {
			w.bumpCounter()
		}
	}
}

// segCounterNow reads the segment generator's counter (nil: it cannot
// be read, a restore marker standing or the store refusing).
func (w *world) segCounterNow() *segment.Counter {
	admin := w.cstore.Connect(w.base)
	defer admin.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	rec, err := admin.ReadCounter(ctx, w.segSpec())
	if err != nil {
		w.note("%s: counter read: %v", segName, err)
		return nil
	}
	return &rec.State
}

// bumpCounter is the operator's bump of the segment generator after a
// restore, as the CLI makes it (BumpCounter: the counter's record raised
// by D in next and seq with its free ranges dropped, and its marker
// cleared, in one write), D covering every ID and every write any node
// asked for (the ledger: what the operator must cover, as the snowflake
// bump covers the time since the snapshot).
func (w *world) bumpCounter() {
	admin := w.cstore.Connect(w.base)
	defer admin.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	// The counter as it stands, or (a marker keeps it from being read)
	// as the restore left it: it can only have moved up since, and a
	// bump raises whatever it finds, so D sized from either covers it.
	base := w.segCounterNow()
	w.mu.Lock()
	if base == nil {
		base = w.segAtRestore
	}
	if base == nil {
		c := segment.NewCounter(w.segDef)
		base = &c
	}
	var by uint64
	for _, s := range w.swaps {
		if s.state.Next > base.Next {
			by = max(by, s.state.Next-base.Next)
		}
		if s.state.Seq > base.Seq {
			by = max(by, s.state.Seq-base.Seq)
		}
	}
	w.mu.Unlock()
	by += 1000
	res, err := admin.BumpCounter(ctx, w.segSpec(), by)
	if err != nil {
		w.note("%s: counter bump by %d: %v", segName, by, err)
		return
	}
	w.ledger("operator", coordinator.CounterRecord{State: res.Before, Raw: res.Before.Encode()}, res.After, nil)
	cleared := "no marker stood"
	if ev := res.Cleared; ev != nil {
		cleared = fmt.Sprintf("marker cleared (acknowledged next %d, shown %d, by %s)", ev.Acked, ev.Shown, ev.Node.Name)
	}
	w.note("%s: counter bumped by %d: next %d → %d, seq %d → %d, %d free IDs dropped; %s", segName, by,
		res.Before.Next, res.After.Next, res.Before.Seq, res.After.Seq, res.Dropped, cleared)
}
