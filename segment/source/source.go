// Package source owns the serving side of a segment generator on one
// node: it claims segments of the generator's counter from the
// coordinator (coordinator.ClaimSegment) ahead of demand — the next one
// while the current one is still being used, sized from the rate at which
// IDs are taken — and hands out their IDs in increasing order. A graceful
// Stop hands the unused remainders back.
//
// Restores: the source remembers the last write of the counter it saw
// (segment.Mark) and reads the counter every PollEvery; a counter whose
// history lacks that write (a restored coordinator, written on since)
// stops it for good, with the evidence written as the generator's restore
// marker, and a marker written by any node stops it at its next read. On
// a shared coordinator a claim's IDs are handed out only after Settle and
// a read that still shows the claim in the counter's history with no
// marker: every live node that can reach the coordinator has read it
// meanwhile, and one that saw a write the restore lost has written the
// marker (docs/design.md, Segment counters).
package source

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sync"
	"time"

	"github.com/firnid/firn/clockguard"
	"github.com/firnid/firn/coordinator"
	"github.com/firnid/firn/segment"
)

// Defaults of Config.
const (
	DefaultMinStep = 1_000
	// DefaultMaxStep bounds a claim at 2^36 IDs: at full NextRange load
	// (30 G IDs a second measured on one node) a node writes the counter
	// about once per 2 s, and kill -9 loses at most what the node held, a
	// few seconds of its rate (a sliver of 2^63).
	DefaultMaxStep  = 1 << 36
	DefaultInterval = 2 * time.Second
	DefaultOutage   = 2 * time.Second
	// DefaultPollEvery and DefaultSettle are the node's values on a
	// shared coordinator (Config.PollEvery, Config.Settle).
	DefaultPollEvery = time.Second
	DefaultSettle    = 2 * DefaultPollEvery
)

// Config is one segment generator's source.
type Config struct {
	Spec     coordinator.CounterSpec
	Counters coordinator.Counters
	// Mark writes the generator's restore marker (the coordinator's
	// MarkRestored); nil: not written (tests).
	Mark func(context.Context, coordinator.RestoreEvidence) error
	// Node is named in the restore marker.
	Node coordinator.NodeInfo
	// Clock reads the time for the demand rate (monotonic) and the
	// marker (wall).
	Clock clockguard.Clock
	// MinStep and MaxStep bound a claim's size; Interval is how long a
	// claim should last at the measured rate, so that under steady load a
	// node writes the counter about once per Interval (more often only
	// where MaxStep binds).
	MinStep, MaxStep uint64
	Interval         time.Duration
	// Outage is how long, at the measured rate, the IDs held when the
	// next claim starts should last beyond half a step and the settle:
	// a coordinator outage (an election) that short refuses nothing
	// (default DefaultOutage). kill -9 loses up to about a step plus
	// this plus the settle and half a step of IDs.
	Outage time.Duration
	// FirstStep is the first claim's size, before any demand is measured
	// (default MinStep; 10 × MinStep with a Settle, since a node that runs
	// dry then waits a whole settle).
	FirstStep uint64
	// Known is the last write of the counter this node saw before (its
	// data dir's record, after a restart); a counter whose history lacks
	// it is a restore. The zero Mark: none.
	Known segment.Mark
	// Lost is what this data dir's previous process held unused when it
	// stopped without handing back (its last Record's held): the first
	// claim adds it to the counter's skipped IDs.
	Lost uint64
	// Record is called with each claim's written counter and the IDs the
	// source then holds unused (the claim included) before any ID of the
	// claim is handed out, and at a graceful Stop with what it could not
	// hand back (the data dir's record of Known and of Lost); an error at
	// a claim discards the claim (its IDs are skipped). Nil: none.
	Record func(m segment.Mark, held uint64) error
	// PollEvery is how often the source reads the counter to check its
	// history (0: never; a coordinator nothing else writes). Settle is how
	// long after a claim lands its IDs wait before a read confirms them
	// (0: usable at once); at least PollEvery, so that every live node has
	// read the claim meanwhile. The node sets DefaultPollEvery and
	// DefaultSettle on a shared coordinator.
	PollEvery, Settle time.Duration
	// Notify, when set, is told after each claim: nil when its IDs are
	// usable, the error when it failed for good, or while the source holds
	// fewer IDs than ServeMargin of its rate (or once a take leaves fewer
	// after a failed claim): the generator then stops serving before its
	// IDs run out, and serves again when a claim lands.
	// It is called from the claim loop, never with the source's lock held.
	Notify func(error)
	// Observe, when set, is told each coordinator call's latency and
	// outcome: op "claim" (a claim, its retries included) or
	// "counter_read" (a periodic read).
	Observe func(op string, took time.Duration, err error)
	// Timeout bounds one coordinator call (default 2 s); RetryEvery is the
	// pause after a failed claim (default 200 ms).
	Timeout    time.Duration
	RetryEvery time.Duration
	// ServeMargin: while claims fail, the source says it cannot serve
	// once it holds fewer IDs than its rate takes in ServeMargin (default
	// 500 ms), so /readyz and health turn before the IDs run out.
	ServeMargin time.Duration
	Log         *slog.Logger
}

// Stats is what a source has done.
type Stats struct {
	Claimed    uint64          // IDs claimed
	Issued     uint64          // IDs handed out
	HandedBack uint64          // IDs handed back at Stop
	Dropped    uint64          // IDs a hand-back could not keep (free list full), a failed Record discarded, or of claims never confirmed
	Claims     uint64          // counter writes that claimed
	Step       uint64          // the size of the next claim
	Available  uint64          // IDs claimed, confirmed and not yet handed out
	Settling   uint64          // IDs claimed, waiting for Settle and a confirming read
	Polls      uint64          // reads of the counter that checked its history
	Adopted    uint64          // IDs of claims whose reply was lost, found landed (ClaimInDoubtError) and taken
	Counter    segment.Counter // as last read or written: Skipped is cluster-wide
}

// ShortError refuses a take larger than what the source holds while its
// claims fail: the source serves takes up to Have, and this one may
// succeed after Wait, once a claim lands.
type ShortError struct {
	Generator  string
	Have, Want uint64
	Wait       time.Duration
	Err        error // why no claim brings more now
}

func (e *ShortError) Error() string {
	return fmt.Sprintf("segment source: generator %q holds %d IDs, fewer than the %d asked for, and cannot claim more now: %v",
		e.Generator, e.Have, e.Want, e.Err)
}

func (e *ShortError) Unwrap() error { return e.Err }

// deadlineMargin is how long before its caller's deadline a take that
// waits for a claim gives up (SettleError).
const deadlineMargin = 20 * time.Millisecond

// SettleError refuses a take whose deadline falls before the claim that
// would cover it is confirmed (Config.Settle).
type SettleError struct {
	Generator string
	Wait      time.Duration // until the claim is confirmed, at the earliest
	Private   bool          // no settle: the claim's write alone is waited for
}

func (e *SettleError) Error() string {
	why := "a claim settles before use on a shared coordinator"
	if e.Private {
		why = "the coordinator's recent latency"
	}
	return fmt.Sprintf("segment source: generator %q: the claim that covers this call is usable in %v (%s), after the call's deadline",
		e.Generator, e.Wait.Round(time.Millisecond), why)
}

// ErrStopped: the source was stopped.
var ErrStopped = errors.New("segment source stopped")

// Source hands out the IDs of claimed segments, in increasing order.
type Source struct {
	cfg Config

	mu       sync.Mutex
	segs     []segment.Range // claimed, confirmed, not handed out; increasing
	avail    uint64
	pending  []settling // claimed, not confirmed yet; increasing
	pendLen  uint64
	need     uint64 // IDs a waiting take lacks: the next claim's least size
	above    uint64 // one past the highest ID claimed (0: none)
	known    segment.Mark
	last     segment.Counter    // the last record read or written
	lost     uint64             // Config.Lost until a claim has counted it
	doubt    *coordinator.Claim // a claim whose reply was lost (ClaimInDoubtError)
	restored bool
	lat      time.Duration // the coordinator's recent latency (observe)               // fatal is a restore: reads go on, a bump clears it
	step     uint64
	fail     error         // why no claim succeeded last (nil: none)
	told     bool          // Notify was told of fail
	pollErr  error         // why the last read failed (nil: none)
	nextPoll time.Duration // monotonic
	fatal    error         // a restore, another pin, a broken counter: no more claims, nothing held served
	// exhausted is the claim that found the definition used up: no more
	// claims, but what the source holds is still handed out (a settling
	// claim once confirmed); takes are refused with it once nothing is.
	exhausted error
	stopped   bool
	changed   chan struct{} // closed and replaced when segs or fail change
	wake      chan struct{}

	// Demand: IDs taken since the window began at winStart (monotonic).
	winStart time.Duration
	winTaken uint64
	rate     float64 // IDs per second, smoothed

	stats Stats
	done  chan struct{}
	stop  context.CancelFunc
}

// settling is a claim waiting for its confirming read.
type settling struct {
	r    segment.Range
	at   time.Duration // monotonic: a read begun at or after it confirms r
	mark segment.Mark  // the claim's own write, which the read must still show
}

// New starts the source: its first claim is made at once.
func New(cfg Config) (*Source, error) {
	if cfg.Counters == nil || cfg.Clock == nil {
		return nil, fmt.Errorf("segment source: Counters and Clock are required")
	}
	if err := cfg.Spec.Validate(); err != nil {
		return nil, err
	}
	if cfg.MinStep == 0 {
		cfg.MinStep = DefaultMinStep
	}
	if cfg.MaxStep == 0 {
		cfg.MaxStep = DefaultMaxStep
	}
	if cfg.MaxStep < cfg.MinStep {
		return nil, fmt.Errorf("segment source: MaxStep %d below MinStep %d", cfg.MaxStep, cfg.MinStep)
	}
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultInterval
	}
	if cfg.Outage <= 0 {
		cfg.Outage = DefaultOutage
	}
	if cfg.FirstStep == 0 {
		cfg.FirstStep = cfg.MinStep
		if cfg.Settle > 0 {
			cfg.FirstStep = min(10*cfg.MinStep, cfg.MaxStep)
		}
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 2 * time.Second
	}
	if cfg.RetryEvery <= 0 {
		cfg.RetryEvery = 200 * time.Millisecond
	}
	if cfg.ServeMargin <= 0 {
		cfg.ServeMargin = 500 * time.Millisecond
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.Settle > 0 && cfg.PollEvery <= 0 {
		return nil, fmt.Errorf("segment source: Settle %v needs PollEvery", cfg.Settle)
	}
	ctx, cancel := context.WithCancel(context.Background())
	_, mono := cfg.Clock.Now()
	s := &Source{cfg: cfg, known: cfg.Known, lost: cfg.Lost, step: cfg.MinStep, changed: make(chan struct{}),
		wake: make(chan struct{}, 1), winStart: mono, nextPoll: mono + cfg.PollEvery,
		done: make(chan struct{}), stop: cancel}
	go s.run(ctx)
	return s, nil
}

// Take appends to runs n IDs (n >= 1) as runs of consecutive IDs, in
// increasing order, all above every ID this source handed out before. It
// waits for a claim only while the source holds fewer than n IDs and a
// claim is under way, until ctx ends; with fewer than n IDs and the last
// claim failed, or the source stopped for good, it refuses at once with
// the cause.
func (s *Source) Take(ctx context.Context, n uint64, runs []segment.Range) ([]segment.Range, error) {
	if n == 0 {
		return runs, fmt.Errorf("segment source: a take of 0 IDs")
	}
	var cut <-chan time.Time // just before the caller's deadline
	var cutT *time.Timer
	s.mu.Lock()
	for s.avail < n {
		err := s.refusalLocked()
		if err == nil && s.exhausted != nil && s.avail+s.pendLen < n {
			// No claim brings more: what the source holds serves smaller
			// takes, and this one is short.
			err = &ShortError{Generator: s.cfg.Spec.Generator, Have: s.avail, Want: n, Wait: s.cfg.RetryEvery, Err: s.exhausted}
			s.mu.Unlock()
			return runs, err
		}
		if err != nil && s.avail > 0 && s.fatal == nil && !s.stopped {
			// The source still serves smaller takes: this one is short,
			// not a reason to stop serving. The claim loop is asked for a
			// claim that covers it.
			if s.avail+s.pendLen < n {
				s.need = max(s.need, n-s.avail-s.pendLen)
			}
			s.askLocked()
			err = &ShortError{Generator: s.cfg.Spec.Generator, Have: s.avail, Want: n, Wait: s.cfg.RetryEvery, Err: err}
		}
		if err != nil {
			s.mu.Unlock()
			return runs, err
		}
		// The next claim covers this take whatever the step: a take
		// larger than the step must not wait for several claims (nor, when
		// refused for its deadline below, find none made when it comes
		// back).
		if s.avail+s.pendLen < n {
			s.need = max(s.need, n-s.avail-s.pendLen)
		}
		s.askLocked()
		if err := s.settleRefusalLocked(ctx, n); err != nil {
			s.mu.Unlock()
			return runs, err
		}
		ch := s.changed
		s.mu.Unlock()
		// The wait ends before the caller's deadline: a claim that takes
		// longer than its estimate is refused as such, not as a deadline.
		if dl, ok := ctx.Deadline(); ok && cutT == nil {
			cutT = time.NewTimer(max(time.Until(dl)-deadlineMargin, 0)) // one per take, however often it waits
			defer cutT.Stop()
			cut = cutT.C
		}
		select {
		case <-ch:
		case <-cut:
			s.mu.Lock()
			if s.avail >= n {
				continue
			}
			wait := max(s.cfg.Settle, s.lat, time.Millisecond) // no Settle: the coordinator's latency
			s.mu.Unlock()
			return runs, &SettleError{Generator: s.cfg.Spec.Generator, Wait: wait, Private: s.cfg.Settle <= 0}
		case <-ctx.Done():
			return runs, fmt.Errorf("segment source: generator %q: waiting for a claim of the counter: %w", s.cfg.Spec.Generator, ctx.Err())
		}
		s.mu.Lock()
	}
	runs = s.takeLocked(n, runs)
	// The last claim failed and what is left would last less than
	// ServeMargin: the generator stops serving now, naming the cause,
	// rather than when the IDs run out (ready means it serves).
	var tell error
	if t := s.troubleLocked(); t != nil && !s.told && s.avail < s.marginLocked() {
		s.told, tell = true, t
	} else if u := s.usedUpLocked(); u != nil && !s.told {
		s.told, tell = true, u // the last ID held is handed out
	}
	s.mu.Unlock()
	if tell != nil && s.cfg.Notify != nil {
		s.cfg.Notify(tell)
	}
	return runs, nil
}

// troubleLocked is why no more IDs may come: the last claim failed, or
// a claim waits to be confirmed and the last read failed (nil: none).
func (s *Source) troubleLocked() error {
	if s.fail != nil {
		return s.fail
	}
	if s.pendLen > 0 && s.pollErr != nil {
		return s.pollErr
	}
	return nil
}

// usedUpLocked is the definition used up when the source holds nothing
// more to hand out, confirmed or settling (nil: it holds some, or claims
// go on). Unlike a failed claim, which may land later, it is not told
// ServeMargin ahead: the IDs held would then never be handed out.
func (s *Source) usedUpLocked() error {
	if s.exhausted != nil && s.avail == 0 && s.pendLen == 0 {
		return s.exhausted
	}
	return nil
}

// marginLocked is how many IDs the measured rate takes in ServeMargin
// (at least 1): fewer left while claims fail, the source says it cannot
// serve.
func (s *Source) marginLocked() uint64 {
	return max(uint64(s.rate*s.cfg.ServeMargin.Seconds()), 1)
}

// settleRefusalLocked refuses a take lacking IDs whose deadline falls
// before the IDs it needs can be confirmed: the settling claims' time, or
// a whole Settle for a claim not made yet.
func (s *Source) settleRefusalLocked(ctx context.Context, n uint64) error {
	dl, ok := ctx.Deadline()
	if !ok {
		return nil
	}
	// The deadline against the process's own time (time.Until: the
	// context's monotonic reading), not the node's clock, which clock
	// faults may have moved.
	left := time.Until(dl)
	_, mono := s.cfg.Clock.Now()
	ready := mono + s.lat // a claim made now; on a private coordinator usable at once
	if s.cfg.Settle > 0 {
		ready += s.cfg.Settle + s.lat // it settles, then its confirming read
	}
	have := s.avail
	for _, p := range s.pending {
		have += p.r.Len()
		if have >= n {
			// The claim loop reads at p.at itself (run: a settling
			// claim's time comes before the period's next read), and a
			// failed read refuses before this (refusalLocked).
			ready = max(p.at, mono) + s.lat
			break
		}
	}
	if wait := ready - mono; wait > 0 && wait > left {
		return &SettleError{Generator: s.cfg.Spec.Generator, Wait: wait, Private: s.cfg.Settle <= 0}
	}
	return nil
}

// refusalLocked is why a take that lacks IDs is refused at once (nil: it
// may wait for the claim under way).
func (s *Source) refusalLocked() error {
	switch {
	case s.stopped:
		return fmt.Errorf("%w: generator %q", ErrStopped, s.cfg.Spec.Generator)
	case s.fatal != nil:
		return s.fatal
	case s.fail != nil:
		return fmt.Errorf("segment source: generator %q: no claimed IDs left and the last claim failed: %w", s.cfg.Spec.Generator, s.fail)
	case s.pendLen > 0 && s.pollErr != nil:
		return fmt.Errorf("segment source: generator %q: no confirmed IDs left, and the read that confirms a claim failed: %w", s.cfg.Spec.Generator, s.pollErr)
	case s.usedUpLocked() != nil:
		return s.exhausted
	}
	return nil
}

// takeLocked hands out n IDs from the claimed segments (s.avail >= n).
func (s *Source) takeLocked(n uint64, runs []segment.Range) []segment.Range {
	left := n
	for left > 0 {
		seg := &s.segs[0]
		k := min(left, seg.Len())
		runs = append(runs, segment.Range{First: seg.First, Last: seg.First + k - 1})
		left -= k
		if k == seg.Len() {
			s.segs = s.segs[1:]
		} else {
			seg.First += k
		}
	}
	s.avail -= n
	s.stats.Issued += n
	s.winTaken += n
	if s.winTaken > s.step/2 {
		s.rateLocked()
	}
	if s.avail+s.pendLen < s.lowLocked() {
		s.askLocked()
	}
	return runs
}

// lowLocked is the low-water mark: fewer IDs than this left (confirmed
// or settling), the next claim starts — half a step, so that at a steady
// rate it lands while half of the current claim remains, plus what the
// rate takes while a claim settles and in an Outage.
func (s *Source) lowLocked() uint64 {
	return max(s.step/2, 1) + uint64(s.rate*(s.cfg.Settle+s.cfg.Outage).Seconds())
}

// askLocked wakes the claim loop.
func (s *Source) askLocked() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// signalLocked tells waiting takes that segs or the failure changed.
func (s *Source) signalLocked() {
	close(s.changed)
	s.changed = make(chan struct{})
}

// run is the claim loop: a claim whenever fewer than the low-water mark
// of IDs are left, retried after a failure; a read of the counter every
// PollEvery and when a settling claim is due; until ctx ends or a fatal
// error.
func (s *Source) run(ctx context.Context) {
	defer close(s.done)
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	for {
		s.mu.Lock()
		if s.stopped || (s.fatal != nil && !s.restored) {
			s.mu.Unlock()
			return
		}
		// After a restore the source only reads, until a bump clears it.
		// A failed claim is retried until one lands, whatever is held:
		// the failure stands until then, and a generator it put out of
		// service takes nothing that would ask for a claim (its measured
		// rate falls with each attempt, and the low-water mark with it).
		need := s.fatal == nil && s.exhausted == nil && (s.avail+s.pendLen < s.lowLocked() || s.need > 0 || s.fail != nil)
		_, mono := s.cfg.Clock.Now()
		due := time.Duration(-1) // when the next read is due (-1: never)
		if s.cfg.PollEvery > 0 || s.restored {
			due = s.nextPoll
		}
		if len(s.pending) > 0 && s.pollErr == nil && (due < 0 || s.pending[0].at < due) {
			// A settling claim is confirmed by the first read after its
			// time; after a failed read, the next is at nextPoll.
			due = s.pending[0].at
		}
		s.mu.Unlock()
		if due >= 0 && due <= mono {
			s.poll(ctx)
			continue
		}
		if need {
			if err := s.claim(ctx); err != nil && !s.pause(ctx, t, s.cfg.RetryEvery) {
				return
			}
			continue
		}
		wait := time.Hour
		if due >= 0 {
			wait = due - mono
		}
		t.Reset(wait)
		select {
		case <-ctx.Done():
			return
		case <-s.wake:
			t.Stop() // no stale value after Stop (Go 1.23 timers)
		case <-t.C:
		}
	}
}

// pause waits d on t (stopped and drained), false when ctx ended first.
func (s *Source) pause(ctx context.Context, t *time.Timer, d time.Duration) bool {
	t.Reset(d)
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// poll reads the counter and checks that its history holds the last write
// the source saw; the read confirms the settling claims due before it
// began. A history without it is a restore (fatal, the marker written); a
// standing marker stops the source too; a failed read is retried after
// RetryEvery, and confirms nothing.
func (s *Source) poll(ctx context.Context) {
	_, began := s.cfg.Clock.Now()
	s.mu.Lock()
	known := s.known
	s.mu.Unlock()
	cctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
	rec, err := coordinator.ReadFollowing(cctx, s.cfg.Counters, s.cfg.Spec, known)
	cancel()
	if err != nil && ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
		err = fmt.Errorf("%w: the read took longer than %v: %v", coordinator.ErrUnavailable, s.cfg.Timeout, err)
	}
	s.observe("counter_read", began, err)
	s.mu.Lock()
	s.stats.Polls++
	if err != nil {
		if ctx.Err() != nil {
			s.mu.Unlock()
			return
		}
		s.nextPoll = began + s.cfg.RetryEvery
		if s.restored {
			s.nextPoll = began + s.pollEvery()
		}
		if s.fatalLocked(ctx, err) {
			fatal := s.fatal
			s.mu.Unlock()
			if s.cfg.Notify != nil {
				s.cfg.Notify(fatal)
			}
			return
		}
		s.pollErr = err
		tell := s.avail < s.marginLocked() && s.pendLen > 0 && !s.told
		s.told = s.told || tell
		s.signalLocked()
		s.mu.Unlock()
		s.cfg.Log.Warn("segment counter read failed", "generator", s.cfg.Spec.Generator, "err", err)
		if tell && s.cfg.Notify != nil {
			s.cfg.Notify(err)
		}
		return
	}
	s.pollErr = nil
	s.nextPoll = began + s.cfg.PollEvery
	if s.restored {
		// The marker is gone and the counter's history does not contradict
		// this node's: a bump cleared the restore. Claims resume; the
		// generator serves again once one is usable.
		s.fatal, s.restored = nil, false
		s.cfg.Log.Warn("segment counter restore cleared (the marker is gone): claiming again", "generator", s.cfg.Spec.Generator,
			"next", rec.State.Next, "seq", rec.State.Seq)
	}
	s.rateLocked()
	if s.known.Seq <= rec.State.Seq { // a claim may have written since the read began
		s.known, s.last = rec.State.Mark(), rec.State
	}
	confirmed, dropped := false, false
	for len(s.pending) > 0 && s.pending[0].at <= began {
		p := s.pending[0]
		s.pending = s.pending[1:]
		s.pendLen -= p.r.Len()
		// Confirmed only by the claim's own write in the history read: a
		// bump since (the history starts again), or more writes than the
		// history keeps, leave it unproven — a claim made on a restored
		// counter before the bump that cleared the restore would repeat
		// IDs. Dropped (skipped), and claimed again.
		if !rec.State.Holds(p.mark) {
			s.lost += p.r.Len()
			s.stats.Dropped += p.r.Len()
			dropped = true
			s.cfg.Log.Warn("segment claim not confirmed: the counter's history no longer shows it (a bump, or many writes since); its IDs are skipped",
				"generator", s.cfg.Spec.Generator, "range", p.r.String(), "seq", p.mark.Seq)
			continue
		}
		s.segs = append(s.segs, p.r)
		s.avail += p.r.Len()
		confirmed = true
	}
	var tell error
	if confirmed {
		s.signalLocked()
		if s.fail == nil {
			s.told = false
		}
	} else if u := s.usedUpLocked(); u != nil && !s.told {
		// The definition used up, and the last settling claim dropped.
		s.signalLocked()
		s.told, tell = true, u
	} else if dropped {
		// A take waiting for the dropped claim looks again: with the
		// definition used up no claim brings more, and it is refused
		// with that cause now, not at its deadline.
		s.signalLocked()
	}
	s.mu.Unlock()
	if s.cfg.Notify != nil && (confirmed || tell != nil) {
		s.cfg.Notify(tell)
	}
}

// claim makes one claim of the current step.
func (s *Source) claim(ctx context.Context) error {
	s.mu.Lock()
	step := max(s.sizeLocked(), s.need)
	s.need = 0
	above, known, doubt := s.above, s.known, s.doubt
	held := s.avail + s.pendLen
	s.mu.Unlock()
	// A claim is a read and a swap: a Timeout each.
	cctx, cancel := context.WithTimeout(ctx, 2*s.cfg.Timeout)
	_, began := s.cfg.Clock.Now()
	var c coordinator.Claim
	var err error
	var own segment.Mark // the claim's own write
	landed := false
	if doubt != nil {
		// The last claim's reply was lost: its write may have landed.
		var rec coordinator.CounterRecord
		var ok bool
		rec, landed, ok, err = coordinator.ResolveClaim(cctx, s.cfg.Counters, s.cfg.Spec, *doubt, known)
		if err == nil {
			s.mu.Lock()
			s.doubt = nil
			switch {
			case landed:
				c = coordinator.Claim{Range: doubt.Range, Record: rec}
				own = doubt.Record.State.Mark()
				s.stats.Adopted += doubt.Range.Len()
			case !ok: // too many writes since to tell: counted as skipped
				s.lost += doubt.Range.Len()
			}
			s.mu.Unlock()
			s.cfg.Log.Info("segment claim in doubt resolved", "generator", s.cfg.Spec.Generator, "range", doubt.Range.String(),
				"landed", landed, "known", ok)
		}
	}
	if err == nil && !landed {
		s.mu.Lock()
		lost := s.lost
		s.mu.Unlock()
		c, err = coordinator.ClaimSegment(cctx, s.cfg.Counters, s.cfg.Spec, step, above, known, lost)
		own = c.Record.State.Mark()
		var de *coordinator.ClaimInDoubtError
		if errors.As(err, &de) {
			s.mu.Lock()
			s.doubt = &de.Claim
			s.mu.Unlock()
		}
	}
	cancel()
	if err != nil && ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
		// The claim's own timeout, not a caller's deadline.
		err = fmt.Errorf("%w: the claim took longer than %v: %v", coordinator.ErrUnavailable, 2*s.cfg.Timeout, err)
	}
	s.observe("claim", began, err)
	if err == nil && s.cfg.Record != nil {
		if rerr := s.cfg.Record(c.Record.State.Mark(), held+c.Range.Len()); rerr != nil {
			s.mu.Lock()
			s.stats.Dropped += c.Range.Len()
			s.mu.Unlock()
			err = fmt.Errorf("recording the claim %v in the data dir (its IDs are skipped): %w", c.Range, rerr)
		}
	}
	s.mu.Lock()
	if err != nil {
		news := err
		var tell bool
		switch {
		case errors.Is(err, segment.ErrExhausted):
			// No more claims, but the IDs held are valid: they are handed
			// out, and the generator stops serving once none is left. An
			// earlier claim's failure told (a source that served on until
			// its margin) is over: told again, the exhaustion when nothing
			// is held, else that it serves (Take tells the exhaustion once
			// the last ID held is handed out).
			s.exhausted, s.fail = err, nil
			news = s.usedUpLocked()
			tell = news != nil || s.told
			s.told = news != nil
			s.cfg.Log.Warn("segment definition used up: no more claims; the IDs held are still handed out", "generator", s.cfg.Spec.Generator,
				"available", s.avail, "settling", s.pendLen, "err", err)
		case !s.fatalLocked(ctx, err):
			s.fail = err
			s.cfg.Log.Warn("segment claim failed; retrying", "generator", s.cfg.Spec.Generator, "err", err)
		}
		s.signalLocked()
		if s.exhausted == nil {
			tell = news != nil && (s.avail < s.marginLocked() || s.fatal != nil)
			s.told = s.told || tell
		}
		if s.fatal != nil {
			news = s.fatal // the refusal every node gives, for a restore
		}
		s.mu.Unlock()
		if tell && s.cfg.Notify != nil {
			s.cfg.Notify(news)
		}
		return err
	}
	s.fail, s.told = nil, false
	s.lost = 0 // counted in the counter's skipped IDs
	s.above = c.Range.Last + 1
	s.known, s.last = c.Record.State.Mark(), c.Record.State
	s.stats.Claimed += c.Range.Len()
	s.stats.Claims++
	if s.cfg.Settle > 0 {
		_, landed := s.cfg.Clock.Now()
		s.pending = append(s.pending, settling{r: c.Range, at: landed + s.cfg.Settle, mark: own})
		s.pendLen += c.Range.Len()
		s.mu.Unlock()
		return nil
	}
	s.segs = append(s.segs, c.Range)
	s.avail += c.Range.Len()
	s.signalLocked()
	s.mu.Unlock()
	if s.cfg.Notify != nil {
		s.cfg.Notify(nil)
	}
	return nil
}

// fatalLocked records err as the end of the claims when it is one: a
// restore found (the marker written), a marker standing, another pin, a
// counter that breaks its rules. It reports whether it was. (The
// definition used up ends the claims too, but what is held still serves:
// claim.)
func (s *Source) fatalLocked(ctx context.Context, err error) bool {
	var rb *coordinator.CounterRolledBackError
	switch {
	case s.restored && (errors.Is(err, coordinator.ErrRestored) || errors.As(err, &rb)):
		// Still restored (a read while the marker stands): nothing new. A
		// history that still lacks the node's write with no marker writes
		// the marker again.
		if rb == nil {
			s.raiseMarkerLocked(ctx, err)
			return true
		}
		if s.cfg.Mark != nil {
			wall, _ := s.cfg.Clock.Now()
			ev := rb.Evidence(s.cfg.Node, wall)
			go func() {
				mctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.Timeout)
				defer cancel()
				_ = s.cfg.Mark(mctx, ev)
			}()
		}
		return true
	case errors.As(err, &rb):
		wall, _ := s.cfg.Clock.Now()
		ev := rb.Evidence(s.cfg.Node, wall)
		// The refusal is the marker's, as every other node gives it (what
		// was found, and the bump that clears it), with this node's finding.
		s.fatal = fmt.Errorf("%w; found here: %w", &coordinator.RestoredError{Evidence: ev}, err)
		if s.cfg.Mark != nil {
			go func() {
				mctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.Timeout)
				defer cancel()
				if merr := s.cfg.Mark(mctx, ev); merr != nil {
					s.cfg.Log.Error("restore marker not written", "generator", s.cfg.Spec.Generator, "err", merr)
				}
			}()
		}
		s.cfg.Log.Error("segment counter rolled back: this generator stops; no node serves it until `firn coordinator bump`",
			"generator", s.cfg.Spec.Generator, "err", err)
		s.restored = true
	case errors.Is(err, coordinator.ErrRestored):
		s.fatal, s.restored = err, true
		s.raiseMarkerLocked(ctx, err)
		s.cfg.Log.Error("segment counter restore marker: this generator stops until `firn coordinator bump`", "generator", s.cfg.Spec.Generator, "err", err)
	case errors.Is(err, coordinator.ErrLayoutMismatch), errors.Is(err, segment.ErrCounter):
		s.fatal = err
		s.cfg.Log.Error("segment source stops claiming", "generator", s.cfg.Spec.Generator, "err", err)
	default:
		return false
	}
	// Nothing claimed is handed out any more: a restored counter may give
	// it out again, and a foreign or broken one is not ours to trust.
	// Those IDs are skipped.
	s.stats.Dropped += s.avail + s.pendLen
	s.segs, s.avail, s.pending, s.pendLen = nil, 0, nil, 0
	s.signalLocked()
	return true
}

// raiseMarkerLocked answers a standing restore marker (err, a
// *coordinator.RestoredError) that records a lower next than this node
// saw: the marker is written again with this node's evidence, which
// replaces it (RestoreEvidence.Covers), so that the bump it asks for
// (coordinator.CounterMinBump) lifts the counter above every ID this node
// may have handed out. A node that finds the marker standing never
// compares the counter's history, so its evidence would otherwise be lost
// and a bump accepted below IDs it handed out.
func (s *Source) raiseMarkerLocked(ctx context.Context, err error) {
	var re *coordinator.RestoredError
	if s.cfg.Mark == nil || !errors.As(err, &re) || !re.Evidence.Counter {
		return
	}
	seen := int64(min(max(s.known.Next, s.above), math.MaxInt64))
	if seen <= re.Evidence.Acked {
		return
	}
	wall, _ := s.cfg.Clock.Now()
	ev := coordinator.RestoreEvidence{Generator: s.cfg.Spec.Generator, Acked: seen, Shown: re.Evidence.Shown, At: wall, Node: s.cfg.Node, Counter: true}
	go func() {
		mctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.Timeout)
		defer cancel()
		if merr := s.cfg.Mark(mctx, ev); merr != nil {
			s.cfg.Log.Error("restore marker not raised to what this node saw", "generator", s.cfg.Spec.Generator, "next", seen, "err", merr)
		}
	}()
}

// markAtStop answers a hand-back refused for a restore (err) as a read
// of the claim loop would: a counter whose history lacks this node's
// write is written as the restore marker, and a standing marker that
// records a lower next than this node saw is raised to it
// (raiseMarkerLocked). A stopping node reads no more: without this, the
// restore it found, or what it saw, is lost with it, and the bump the
// marker asks for (or no marker at all) lets the counter give out again
// IDs this node handed out. It reports whether err was such a refusal.
func (s *Source) markAtStop(ctx context.Context, err error) bool {
	var rb *coordinator.CounterRolledBackError
	var re *coordinator.RestoredError
	isRB, isRE := errors.As(err, &rb), errors.As(err, &re) && re.Evidence.Counter
	if !isRB && !isRE {
		return false
	}
	if s.cfg.Mark == nil {
		return true
	}
	s.mu.Lock()
	// The hand-backs before may have lowered the counter's next below
	// IDs this node handed out: what it claimed counts too.
	seen := int64(min(max(s.known.Next, s.above), math.MaxInt64))
	s.mu.Unlock()
	wall, _ := s.cfg.Clock.Now()
	var ev coordinator.RestoreEvidence
	if isRB {
		ev = rb.Evidence(s.cfg.Node, wall)
		ev.Acked = max(ev.Acked, seen)
	} else {
		if seen <= re.Evidence.Acked {
			return true
		}
		ev = coordinator.RestoreEvidence{Generator: s.cfg.Spec.Generator, Acked: seen, Shown: re.Evidence.Shown, At: wall, Node: s.cfg.Node, Counter: true}
	}
	if merr := s.cfg.Mark(ctx, ev); merr != nil {
		s.cfg.Log.Error("restore marker not written at stop", "generator", s.cfg.Spec.Generator, "next", ev.Acked, "err", merr)
	} else {
		s.cfg.Log.Error("segment counter restore found at stop: the restore marker is written; no node claims until `firn coordinator bump`",
			"generator", s.cfg.Spec.Generator, "err", err)
	}
	return true
}

// sizeLocked is the next claim's size: the IDs the measured rate takes in
// Interval, within [MinStep, MaxStep]. The rate is smoothed over windows
// of at least a tenth of Interval.
func (s *Source) sizeLocked() uint64 {
	s.rateLocked()
	want := uint64(s.rate * s.cfg.Interval.Seconds())
	least := s.cfg.MinStep
	if s.stats.Claims == 0 {
		least = max(least, s.cfg.FirstStep)
	}
	s.step = min(max(want, least), s.cfg.MaxStep)
	s.stats.Step = s.step
	return s.step
}

// rateLocked updates the measured rate from the window of takes, when
// the window spans at least a tenth of Interval. Called at each claim, at
// each read of the counter, and by a take once the window has taken half
// a step (a burst), so that the low-water mark follows demand between
// claims.
func (s *Source) rateLocked() {
	_, mono := s.cfg.Clock.Now()
	if el := mono - s.winStart; el >= s.cfg.Interval/10 && el > 0 {
		r := float64(s.winTaken) / el.Seconds()
		if s.rate == 0 || r > s.rate {
			s.rate = r // rises at once: a burst must not stall
		} else {
			s.rate = 0.7*s.rate + 0.3*r
		}
		s.winStart, s.winTaken = mono, 0
	}
}

// Stats reports what the source has done.
func (s *Source) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.stats
	st.Available, st.Settling, st.Counter, st.Step = s.avail, s.pendLen, s.last, s.step
	return st
}

// Err is why the source cannot serve now (nil while it holds IDs or a
// claim may still bring some).
func (s *Source) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.avail > 0 && s.fatal == nil {
		return nil
	}
	return s.refusalLocked()
}

// pollEvery is the period of reads: PollEvery, or DefaultPollEvery where
// the source reads only to learn that a restore was cleared.
func (s *Source) pollEvery() time.Duration {
	if s.cfg.PollEvery > 0 {
		return s.cfg.PollEvery
	}
	return DefaultPollEvery
}

// observe reports a coordinator call begun at began (monotonic).
func (s *Source) observe(op string, began time.Duration, err error) {
	_, now := s.cfg.Clock.Now()
	took := now - began
	s.mu.Lock()
	// The coordinator's latency, for how long a take would wait: rises at
	// once, decays by a fifth per call.
	// A call never takes longer than its timeout (2 × Timeout, a claim):
	// a longer reading is the process paused, not the coordinator.
	s.lat = max(min(took, 2*s.cfg.Timeout), s.lat*4/5)
	s.mu.Unlock()
	if s.cfg.Observe != nil {
		s.cfg.Observe(op, took, err)
	}
}

func (s *Source) fatalErr() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.fatal
}

// Stop ends the claims and, when handBack, returns every claimed ID not
// handed out to the counter (highest first, so the counter comes down
// where it can), within ctx: a claim not confirmed yet only while the
// counter's history still holds its write (coordinator.HandBackUnconfirmed).
// Takes after Stop are refused. It returns the IDs handed back; those it
// could not hand back are lost (skipped).
func (s *Source) Stop(ctx context.Context, handBack bool) (uint64, error) {
	s.mu.Lock()
	if s.stopped {
		s.mu.Unlock()
		return 0, nil
	}
	s.stopped = true
	s.signalLocked()
	s.mu.Unlock()
	s.stop()
	<-s.done
	s.mu.Lock()
	// The confirmed segments, then the settling claims (above them) with
	// the claim's own write, which their hand-back must still find.
	type held struct {
		r   segment.Range
		own *segment.Mark // nil: confirmed
	}
	segs := make([]held, 0, len(s.segs)+len(s.pending))
	for _, r := range s.segs {
		segs = append(segs, held{r: r})
	}
	for _, p := range s.pending {
		segs = append(segs, held{r: p.r, own: &p.mark})
	}
	known, doubt, lost := s.known, s.doubt, s.lost
	s.segs, s.avail, s.pending, s.pendLen = nil, 0, nil, 0
	s.mu.Unlock()
	if !handBack {
		return 0, nil // a crash: the last claim's record of what was held stands
	}
	var back, failed uint64
	if doubt != nil {
		failed = doubt.Range.Len() // its reply was lost: if it landed, it is lost
	}
	var errs []error
	marked := false // a restore this stop found is marked once
	for i := len(segs) - 1; i >= 0; i-- {
		r := segs[i].r
		var dropped uint64
		var rec coordinator.CounterRecord
		var err error
		if segs[i].own == nil {
			dropped, rec, err = coordinator.HandBackSegment(ctx, s.cfg.Counters, s.cfg.Spec, r, known)
		} else {
			// A claim never confirmed (still settling, or adopted after a
			// lost reply) goes back only while the counter's history still
			// holds its write: after a bump it may be a claim on a restored
			// counter, whose IDs the bumped counter must not give out again.
			dropped, rec, err = coordinator.HandBackUnconfirmed(ctx, s.cfg.Counters, s.cfg.Spec, r, known, *segs[i].own)
		}
		if errors.Is(err, coordinator.ErrUnconfirmed) {
			failed += r.Len()
			s.mu.Lock()
			s.stats.Dropped += r.Len()
			s.mu.Unlock()
			s.cfg.Log.Warn("segment claim not handed back: the counter's history no longer shows it (a bump, or many writes since); its IDs are skipped",
				"generator", s.cfg.Spec.Generator, "range", r.String(), "seq", segs[i].own.Seq)
			continue
		}
		if err != nil {
			failed += r.Len()
			errs = append(errs, fmt.Errorf("hand-back of %v: %w", r, err))
			if !marked {
				marked = s.markAtStop(ctx, err)
			}
			continue
		}
		known = rec.State.Mark()
		back += r.Len() - dropped
		s.mu.Lock()
		s.stats.HandedBack += r.Len() - dropped
		s.stats.Dropped += dropped // HandBack counted them as skipped
		s.known, s.last = known, rec.State
		s.mu.Unlock()
	}
	if s.cfg.Record != nil {
		// What could not be handed back is lost, and so are the claims a
		// read dropped unconfirmed since the last claim: the next start
		// counts them (a restored counter refuses the hand-back, and a
		// restore is cleared by a bump, not counted here).
		lost += failed
		if s.fatalErr() != nil {
			lost = 0
		}
		if err := s.cfg.Record(known, lost); err != nil {
			errs = append(errs, err)
		}
	}
	return back, errors.Join(errs...)
}
