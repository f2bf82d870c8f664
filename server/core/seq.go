package core

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/firnid/firn/clockguard"
	"github.com/firnid/firn/coordinator"
	"github.com/firnid/firn/segment"
	"github.com/firnid/firn/seq"
	"github.com/firnid/firn/seq/sections"
)

// A sequence generator (GeneratorConfig.Segment with Sections) hands out
// per-key sequences from the sections this node owns (seq/sections). Like
// a segment generator it has no worker, ring or clock; its serving state
// is serving once every section the node should own serves here, and
// until then names why (sections.StartingError: STARTING while it waits,
// COORDINATOR_UNAVAILABLE when a take failed); after that a call for a
// key of a section owned elsewhere is refused naming the owner
// (WRONG_NODE), one for a section between owners names the wait
// (SECTION_MOVING).

// isSeq reports whether rt is a sequence generator.
func (rt *Generator) isSeq() bool { return rt.cfg.Segment != nil && rt.cfg.Segment.IsSeq() }

// seqDef is rt's sequence definition.
func (rt *Generator) seqDef() seq.Definition {
	return seq.Definition{Sections: rt.cfg.Segment.Sections}
}

// startSeq starts rt's sections manager.
func (c *Core) startSeq(rt *Generator) error {
	counters, ok := c.coord.(coordinator.Counters)
	if !ok {
		return fmt.Errorf("%w: generator %s: the coordinator keeps no counters", ErrConfig, rt.cfg.Name)
	}
	admin, ok := c.coord.(coordinator.Admin)
	if !ok {
		return fmt.Errorf("%w: generator %s: the coordinator lists no slots", ErrConfig, rt.cfg.Name)
	}
	known, _ := rt.local.CounterMark()
	sc := sections.Config{
		Generator: rt.cfg.Name,
		Def:       rt.seqDef(),
		Coord:     c.coord,
		Workers:   admin.Workers,
		Counters:  counters,
		Node:      c.nodeInfo,
		Clock:     c.clock,
		Timeout:   c.cfg.Timing.Timeout,
		Known:     known,
		Record:    func(m segment.Mark) error { return rt.local.RecordCounter(m, 0) },
		Mark:      c.coord.MarkRestored,
		Log:       c.log.With("generator", rt.cfg.Name),
		Notify:    func(err error) { rt.seqState(err) },
		Observe: func(op string, took time.Duration, err error) {
			c.hm.latency.WithLabelValues(op).Observe(took.Seconds())
			if err != nil {
				c.hm.errors.WithLabelValues(op).Inc()
			}
		},
	}
	sc.TakeBack = c.cfg.PrivateCoordinator
	if !c.cfg.PrivateCoordinator {
		// A take settles before use on a shared coordinator, which may be
		// restored under the cluster (docs/design.md, Per-key sequences).
		sc.Settle = sections.DefaultSettle
	}
	m, err := sections.New(sc)
	if err != nil {
		return err
	}
	rt.seqm = m
	return nil
}

// stopSeq stops rt's manager: a graceful stop frees the sections' leases
// at once, a crash leaves them to their TTL.
func (c *Core) stopSeq(rt *Generator) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*c.cfg.Timing.Timeout)
	defer cancel()
	rt.seqm.Stop(ctx, !c.crashed.Load())
}

// seqState feeds the manager's news to the serving state.
func (rt *Generator) seqState(err error) {
	if rt.counterNews(err) {
		return
	}
	var starting *sections.StartingError
	switch {
	case errors.Is(err, coordinator.ErrNameInUse):
		rt.state.SetCause(clockguard.SourceLease, err.Error(), clockguard.Detail{Code: clockguard.CodeInstanceConflict})
	case errors.As(err, &starting) && starting.Err == nil:
		// Not every section it should own serves yet, and no take
		// failed: it waits (a previous owner's lease, a settle).
		rt.state.SetCause(clockguard.SourceLease, "sequence sections: "+err.Error(), clockguard.Detail{Code: clockguard.CodeStarting})
	default:
		rt.state.SetCause(clockguard.SourceLease, "sequence sections: "+err.Error(),
			clockguard.Detail{Code: clockguard.CodeCoordinatorUnavailable})
	}
	_ = rt.state.Ready()
}

// seqLookup is the named sequence generator; any other kind is refused
// naming it. One whose stored definition is not known yet is found: its
// state holds that cause, and each call (each item of NextSeqs) is
// refused with it (refusal).
func (c *Core) seqLookup(name string) (*Generator, error) {
	rt, err := c.Find(name)
	if err != nil {
		return nil, err
	}
	if !rt.isSeq() {
		return nil, BadField("generator", Echo(rt.cfg.Name), "a sequence generator",
			"generator %q is a %s generator: NextSeq, NextSeqs and CurrentSeq serve sequence generators (--generator NAME=seq)", rt.cfg.Name, rt.cfg.Kind())
	}
	return rt, nil
}

// CheckSeq checks one item of a sequence request: the key's length and
// the count's bound, each refused naming the field and the bound.
func CheckSeq(key []byte, count uint64) error {
	if err := seq.CheckKey(key); err != nil {
		return BadField("key", strconv.Itoa(len(key))+" bytes", "1.."+strconv.Itoa(seq.MaxKey)+" bytes", "%v", err)
	}
	if err := seq.CheckCount(count); err != nil {
		return BadField("count", strconv.FormatUint(count, 10), "1.."+strconv.Itoa(seq.MaxCount), "%v", err)
	}
	return nil
}

// NextSeq hands out count values of key's sequence in the named sequence
// generator: the first is returned, the others follow it.
func (c *Core) NextSeq(ctx context.Context, generator string, key []byte, count uint64) (uint64, error) {
	if c.allow.Load() {
		if err := c.Authorize(ctx, generator); err != nil {
			return 0, err
		}
	}
	rt, err := c.seqLookup(generator)
	if err != nil {
		return 0, err
	}
	return rt.nextSeq(ctx, key, count)
}

func (rt *Generator) nextSeq(ctx context.Context, key []byte, count uint64) (uint64, error) {
	if err := CheckSeq(key, count); err != nil {
		return 0, err
	}
	if err := rt.refusal(); err != nil {
		return 0, err
	}
	first, err := rt.seqm.Next(ctx, key, count)
	if err != nil {
		if ctx.Err() != nil {
			return 0, ctx.Err()
		}
		return 0, err
	}
	rt.issued.Add(count)
	return first, nil
}

// SeqItem is one item of NextSeqs: a key and its count; First or Err is
// its outcome.
type SeqItem struct {
	Key   []byte
	Count uint64
	First uint64
	Err   error
}

// NextSeqs serves every item of items (each refused alone with its
// reason); an unknown generator or one of another kind refuses the call.
func (c *Core) NextSeqs(ctx context.Context, generator string, items []SeqItem) error {
	if c.allow.Load() {
		if err := c.Authorize(ctx, generator); err != nil {
			return err
		}
	}
	rt, err := c.seqLookup(generator)
	if err != nil {
		return err
	}
	if len(items) < 1 || len(items) > seq.MaxItems {
		return BadField("items", strconv.Itoa(len(items)), "1.."+strconv.Itoa(seq.MaxItems), "%d items: a call carries 1 to %d", len(items), seq.MaxItems)
	}
	for i := range items {
		it := &items[i]
		it.First, it.Err = rt.nextSeq(ctx, it.Key, it.Count)
	}
	return nil
}

// CurrentSeq is a value at or above every value the named sequence
// generator handed out for key, without handing one out.
func (c *Core) CurrentSeq(ctx context.Context, generator string, key []byte) (uint64, error) {
	if c.allow.Load() {
		if err := c.Authorize(ctx, generator); err != nil {
			return 0, err
		}
	}
	rt, err := c.seqLookup(generator)
	if err != nil {
		return 0, err
	}
	if err := CheckSeq(key, 1); err != nil {
		return 0, err
	}
	if err := rt.refusal(); err != nil {
		return 0, err
	}
	return rt.seqm.Current(ctx, key)
}

// SeqOwners is a sequence generator's section map as this node last read
// it; nil for another kind.
func (rt *Generator) SeqOwners() []sections.Owner {
	if rt.seqm == nil {
		return nil
	}
	return rt.seqm.Owners()
}

// SeqStats is what a sequence generator's manager has done; the zero
// Stats for another kind.
func (rt *Generator) SeqStats() sections.Stats {
	if rt.seqm == nil {
		return sections.Stats{}
	}
	return rt.seqm.Stats()
}
