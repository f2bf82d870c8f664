package core

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/firnid/firn/clockguard"
	"github.com/firnid/firn/coordinator"
	"github.com/firnid/firn/generator"
	"github.com/firnid/firn/segment"
	"github.com/firnid/firn/segment/source"
	"github.com/firnid/firn/server/admission"
)

// A segment generator (GeneratorConfig.Segment) hands out dense IDs from
// segments of a counter the coordinator keeps (segment/source). It has no
// worker, no ring and no clock: the clock policy never holds it. Its
// serving state is serving once its first claim landed and while it holds
// claimed IDs or the last claim succeeded; the last claim's failure is its
// reason otherwise.

// isSegment reports whether rt is a segment generator or a sequence
// generator (isSeq): a generator on a counter of the coordinator, with no
// worker, ring or clock.
func (rt *Generator) isSegment() bool { return rt.cfg.Segment != nil }

// newSegmentGenerator is the Generator of segment generator gc: a serving
// state of its own, outside the clock policy; the source comes at Start.
func newSegmentGenerator(cfg Config, gc GeneratorConfig, isDefault bool, clock clockguard.Clock, log *slog.Logger) *Generator {
	return &Generator{
		cfg:       gc,
		clock:     clock,
		isDefault: isDefault,
		maxBatch:  cfg.MaxBatchFor(gc),
		maxRange:  cfg.MaxRangeFor(gc),
		state: clockguard.NewServingState(gc.Name,
			clockguard.WithStateClock(clock), clockguard.WithStateLogger(log)),
	}
}

// stopSegment stops rt's source: a graceful stop hands the claimed IDs
// not handed out back to the counter; a crash leaves them (skipped).
func (c *Core) stopSegment(rt *Generator) {
	if rt.seg == nil || !rt.segStopped.CompareAndSwap(false, true) {
		return // never started, or stopped already (retire, then stop)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*c.cfg.Timing.Timeout)
	defer cancel()
	back, err := rt.seg.Stop(ctx, !c.crashed.Load())
	if err != nil {
		c.log.Warn("segment remainders not all handed back; they are skipped", "generator", rt.cfg.Name, "err", err)
	}
	if back > 0 {
		c.log.Info("segment remainders handed back", "generator", rt.cfg.Name, "ids", back)
	}
}

// startSegment starts rt's source on the coordinator's counters.
func (c *Core) startSegment(rt *Generator) error {
	counters, ok := c.coord.(coordinator.Counters)
	if !ok {
		return fmt.Errorf("%w: generator %s: the coordinator keeps no segment counters", ErrConfig, rt.cfg.Name)
	}
	known, held := rt.local.CounterMark()
	sc := source.Config{
		Spec:     coordinator.CounterSpec{Generator: rt.cfg.Name, Definition: *rt.cfg.Segment},
		Counters: counters,
		Mark:     c.coord.MarkRestored,
		Node:     c.nodeInfo,
		Clock:    c.clock,
		Timeout:  c.cfg.Timing.Timeout,
		Log:      c.log.With("generator", rt.cfg.Name),
		Notify:   func(err error) { rt.segmentState(err) },
		Observe: func(op string, took time.Duration, err error) {
			c.hm.latency.WithLabelValues(op).Observe(took.Seconds())
			if err != nil {
				c.hm.errors.WithLabelValues(op).Inc()
			}
		},
		// The data dir remembers the node's last write of the counter, so
		// that a restart checks the counter's history for it, and what the
		// node held unused, which a restart after a crash counts as skipped.
		RetryEvery: segmentRetry,
		Known:      known,
		Lost:       held,
		Record:     rt.local.RecordCounter,
	}
	if !c.cfg.PrivateCoordinator {
		// A shared coordinator may be restored under the cluster: read the
		// counter every second, and let a claim settle before use
		// (docs/design.md, Segment counters: restores).
		sc.PollEvery, sc.Settle = source.DefaultPollEvery, source.DefaultSettle
	}
	src, err := source.New(sc)
	if err != nil {
		return err
	}
	rt.seg = src
	return nil
}

// segmentRetry is how soon a segment generator's source claims again
// after a failed claim (source.Config.RetryEvery, left at its default).
const segmentRetry = 200 * time.Millisecond

// segmentState feeds the source's news to the serving state: nil once a
// claim landed (the first one ends the start checks), else why the
// source holds no IDs and cannot claim.
func (rt *Generator) segmentState(err error) {
	if rt.counterNews(err) {
		return
	}
	if errors.Is(err, segment.ErrExhausted) {
		rt.state.SetCause(clockguard.SourceLease, err.Error(), clockguard.Detail{Code: clockguard.CodeReservationExhausted,
			Limit: fmt.Sprintf("max=%d", rt.cfg.Segment.Max)})
	} else {
		// The source claims again every segmentRetry: a caller retrying
		// sooner is refused again (RetryInfo, as a reservation's).
		rt.state.SetCause(clockguard.SourceLease, "segment claim failed: "+err.Error(),
			clockguard.Detail{Code: clockguard.CodeCoordinatorUnavailable, RetryEvery: segmentRetry})
	}
	_ = rt.state.Ready()
}

// counterNews is what every kind kept on a counter of the coordinator
// (segment and sequence generators) tells its serving state alike: nil,
// serving (the start checks end); a restore found or a marker standing,
// RESTORE_DETECTED; a pin of another definition or a counter that does
// not decode, as for a snowflake generator's pin. False for any other
// error, which the kind words itself.
func (rt *Generator) counterNews(err error) bool {
	switch {
	case err == nil:
		rt.state.Clear(clockguard.SourceCoordinator)
		rt.state.Clear(clockguard.SourceLease)
	case errors.Is(err, coordinator.ErrRolledBack), errors.Is(err, coordinator.ErrRestored):
		rt.state.SetCause(clockguard.SourceCoordinator, err.Error(), clockguard.Detail{Code: clockguard.CodeRestoreDetected})
	case errors.Is(err, coordinator.ErrLayoutMismatch), errors.Is(err, coordinator.ErrSchemaTooNew), errors.Is(err, segment.ErrCounter):
		rt.state.Set(clockguard.SourceCoordinator, err.Error())
	default:
		return false
	}
	_ = rt.state.Ready()
	return true
}

// segmentRuns takes n IDs of a segment generator as runs.
func (rt *Generator) segmentRuns(ctx context.Context, n uint64) ([]segment.Range, error) {
	if rt.isSeq() {
		return nil, BadField("generator", Echo(rt.cfg.Name), "a snowflake or segment generator",
			"generator %q is a sequence generator: its values are per key (NextSeq, NextSeqs, CurrentSeq)", rt.cfg.Name)
	}
	if err := rt.refusal(); err != nil {
		return nil, err
	}
	runs, err := rt.seg.Take(ctx, n, make([]segment.Range, 0, 2))
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err() // the caller's deadline, not a claim's timeout
		}
		var se *source.SettleError
		var short *source.ShortError
		switch {
		case errors.As(err, &se):
			// The generator serves; this call's deadline is too short for
			// the claim that would cover it.
			return nil, &admission.OverloadedError{Generator: rt.cfg.Name, Asked: int(min(n, 1<<31)), Deadline: true, RetryAfter: se.Wait,
				Detail: fmt.Sprintf("the claim of the counter that covers these %d IDs is usable in %v (a claim settles %v on a shared coordinator), after the call's deadline", n, se.Wait.Round(time.Millisecond), source.DefaultSettle)}
		case errors.As(err, &short) && errors.Is(short.Err, segment.ErrExhausted):
			// The definition is used up: no claim brings more, here or at
			// any other node. The call is refused with that cause (the
			// IDs held still serve smaller calls), and no retry is
			// offered: none would serve it.
			return nil, &admission.OverloadedError{Generator: rt.cfg.Name, Asked: int(min(n, 1<<31)),
				Cause: string(clockguard.CodeReservationExhausted), Have: int64(min(short.Have, 1<<62)),
				Detail: fmt.Sprintf("this node holds %d IDs, fewer than these %d, and the definition is used up (%v)", short.Have, n, short.Err)}
		case errors.As(err, &short):
			// The generator serves smaller calls from what it holds, so
			// its state serves; this call is refused with the cause
			// (COORDINATOR_UNAVAILABLE: claims fail), never as an
			// overload — no queue is full — and not served in part, which
			// would break "exactly count IDs".
			return nil, &admission.OverloadedError{Generator: rt.cfg.Name, Asked: int(min(n, 1<<31)), RetryAfter: short.Wait,
				Cause: string(clockguard.CodeCoordinatorUnavailable), Have: int64(min(short.Have, 1<<62)),
				Detail: fmt.Sprintf("this node holds %d IDs, fewer than these %d, and claims of the counter fail (%v)", short.Have, n, short.Err)}
		}
		if r := rt.refusal(); r != nil {
			return nil, r
		}
		// The source cannot serve: the state says so (its news may not
		// have reached the state yet), and the refusal is the state's.
		rt.segmentState(err)
		if r := rt.refusal(); r != nil {
			return nil, r
		}
		return nil, &NotServingError{Generator: rt.cfg.Name, Reason: err.Error(), Code: clockguard.CodeCoordinatorUnavailable}
	}
	rt.issued.Add(n)
	return runs, nil
}

// segmentFill fills dst with IDs of a segment generator.
func (rt *Generator) segmentFill(ctx context.Context, dst []uint64) error {
	runs, err := rt.segmentRuns(ctx, uint64(len(dst)))
	if err != nil {
		return err
	}
	i := 0
	for _, r := range runs {
		for id := r.First; ; id++ {
			dst[i] = id
			i++
			if id == r.Last {
				break
			}
		}
	}
	return nil
}

// segmentRanges is segmentRuns as the API's runs.
func (rt *Generator) segmentRanges(ctx context.Context, n uint64) ([]generator.Run, error) {
	runs, err := rt.segmentRuns(ctx, n)
	if err != nil {
		return nil, err
	}
	out := make([]generator.Run, len(runs))
	for i, r := range runs {
		out[i] = generator.Run{First: r.First, Count: r.Len()}
	}
	return out, nil
}

// SegmentStats is what a segment generator's source has done; the zero
// Stats for a snowflake generator.
func (rt *Generator) SegmentStats() source.Stats {
	if rt.seg == nil {
		return source.Stats{}
	}
	return rt.seg.Stats()
}

// Decode splits an ID of rt into its fields. A segment generator's IDs
// are numbers from a counter, with no fields: refused naming the kind.
func (rt *Generator) Decode(id uint64) (generator.Parts, error) {
	if rt.isSegment() {
		return generator.Parts{}, BadField("generator", Echo(rt.cfg.Name), "a snowflake generator",
			"generator %q is a %s generator: its IDs are numbers from a counter, with no time, worker or sequence to decode", rt.cfg.Name, rt.cfg.Kind())
	}
	p, err := rt.cfg.Layout.Decode(id)
	if err != nil {
		return p, BadField("id", strconv.FormatUint(id, 10), "", "%v", err)
	}
	return p, nil
}
