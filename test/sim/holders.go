package sim

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/firnid/firn/coordinator"
)

// The holder-interval check. Each holder logs the interval it serves —
// "holder interval opened" with its floor, "holder interval closed" with
// its floor, the reservation it had acknowledged and the highest time it
// issued (server/core/holder.go) — and the simulator reads those events as they
// are written. A holder's IDs lie above its floor and at or below what it
// acknowledged, and the intervals (floor, highest] of one worker's holders
// never overlap, whichever node held them (docs/design.md, Invariants).

// interval is one holder's span of one worker's time field.
type interval struct {
	node            string
	holding         uint64 // the holding's number in its node's events
	floor           int64
	reserved        int64 // -1 while open: what it acknowledged is read at close
	highest         int64
	open            bool
	openAt, closeAt time.Duration // virtual times since the run began
}

// holderKey names one node's holders of one worker.
type holderKey struct {
	node string
	slot coordinator.Slot
}

// holderEvent records an opened or closed interval and checks it. A
// node's holders of one worker are its open intervals, or its latest
// closed one when none is open: two may stand open at once for a moment,
// a holding whose lease ended not yet closed beside one that took the
// worker again (their events name their holdings apart).
func (w *world) holderEvent(node, event string, holding uint64, slot coordinator.Slot, floor, reserved, highest int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	k := holderKey{node, slot}
	switch event {
	case "holder_open":
		var open []*interval
		for _, iv := range w.holders[k] {
			if iv.open {
				open = append(open, iv)
			}
		}
		w.holders[k] = append(open, &interval{node: node, holding: holding, floor: floor, reserved: -1, highest: floor, open: true, openAt: w.since()})
	case "holder_close":
		var iv *interval
		for _, o := range w.holders[k] {
			if o.open && o.holding == holding {
				iv = o
			}
		}
		if iv == nil {
			w.violations = append(w.violations, fmt.Sprintf("%9v  %s: closed a holder interval of %s it never opened", w.since(), node, slot))
			return
		}
		iv.open, iv.reserved, iv.closeAt = false, reserved, w.since()
		iv.highest = max(iv.highest, highest)
		if iv.highest > iv.reserved && iv.highest > iv.floor {
			w.violations = append(w.violations, fmt.Sprintf("%9v  %s: holder of %s issued time %d above the %d it had acknowledged",
				w.since(), node, slot, iv.highest, iv.reserved))
		}
		if iv.highest <= iv.floor {
			return // issued nothing: no span to overlap
		}
		for _, o := range w.closed[slot] {
			if o.floor < iv.highest && iv.floor < o.highest {
				w.violations = append(w.violations, fmt.Sprintf("%9v  holder intervals of %s overlap: %s (%d, %d] from %s to %s and %s (%d, %d] from %s to %s",
					w.since(), slot, o.node, o.floor, o.highest, o.openAt, o.closeAt, node, iv.floor, iv.highest, iv.openAt, iv.closeAt))
				break
			}
		}
		c := *iv
		w.closed[slot] = append(w.closed[slot], &c)
	}
}

// checkHolderLocked checks an ID's time against the intervals of its
// node's holders of its worker (held w.mu): some interval must take it,
// above its floor and, once closed, at or below what it acknowledged. The
// one interval that takes it counts it in its highest; an ID two open
// intervals both take counts in neither (each holder's own highest,
// logged at its close, still does).
func (w *world) checkHolderLocked(node, who string, slot coordinator.Slot, t int64, id uint64) {
	ivs := w.holders[holderKey{node, slot}]
	if len(ivs) == 0 {
		w.violations = append(w.violations, fmt.Sprintf("%9v  %s: ID %d of %s from a node that never held it", w.since(), who, id, slot))
		return
	}
	var fit *interval
	fits := 0
	for _, iv := range ivs {
		if t > iv.floor && (iv.open || t <= iv.reserved) {
			fit, fits = iv, fits+1
		}
	}
	if fits == 1 {
		fit.highest = max(fit.highest, t)
	}
	if fits > 0 {
		return
	}
	// Told against the closed interval above whose floor it lies that
	// acknowledged the most, else against the latest's floor.
	var above *interval
	for _, iv := range ivs {
		if t > iv.floor && (above == nil || iv.reserved > above.reserved) {
			above = iv
		}
	}
	if above == nil {
		w.violations = append(w.violations, fmt.Sprintf("%9v  %s: ID %d has time %d at or below its holder's floor %d (%s)", w.since(), who, id, t, ivs[len(ivs)-1].floor, slot))
	} else {
		w.violations = append(w.violations, fmt.Sprintf("%9v  %s: ID %d has time %d above its closed holder's acknowledged %d (%s)", w.since(), who, id, t, above.reserved, slot))
	}
}

// holderLog passes a node's log records on and feeds the holder events to
// the world.
type holderLog struct {
	w    *world
	node string
	next slog.Handler
}

func (h *holderLog) Enabled(ctx context.Context, l slog.Level) bool {
	// The holder events are Info; a segment generator's failed hand-back
	// is a Warn.
	return l == slog.LevelInfo || l == slog.LevelWarn || h.next.Enabled(ctx, l)
}

func (h *holderLog) Handle(ctx context.Context, r slog.Record) error {
	if r.Level == slog.LevelWarn && r.Message == segHandBackFailed {
		h.w.mu.Lock()
		h.w.segWarned[h.node]++
		h.w.mu.Unlock()
	}
	if r.Message == "holder interval opened" || r.Message == "holder interval closed" {
		var event string
		var holding uint64
		var slot coordinator.Slot
		floor, reserved, highest := int64(-1), int64(-1), int64(-1)
		r.Attrs(func(a slog.Attr) bool {
			switch a.Key {
			case "event":
				event = a.Value.String()
			case "holding":
				holding = uint64(number(a.Value))
			case "worker":
				slot.Worker = uint64(number(a.Value))
			case "datacenter":
				slot.Datacenter = uint64(number(a.Value))
			case "floor":
				floor = number(a.Value)
			case "reserved":
				reserved = number(a.Value)
			case "highest":
				highest = number(a.Value)
			}
			return true
		})
		h.w.holderEvent(h.node, event, holding, slot, floor, reserved, highest)
	}
	if !h.next.Enabled(ctx, r.Level) {
		return nil
	}
	return h.next.Handle(ctx, r)
}

func (h *holderLog) WithAttrs(as []slog.Attr) slog.Handler {
	return &holderLog{w: h.w, node: h.node, next: h.next.WithAttrs(as)}
}

func (h *holderLog) WithGroup(name string) slog.Handler {
	return &holderLog{w: h.w, node: h.node, next: h.next.WithGroup(name)}
}

// number reads a logged integer, signed or not.
func number(v slog.Value) int64 {
	switch v.Kind() {
	case slog.KindInt64:
		return v.Int64()
	case slog.KindUint64:
		return int64(v.Uint64())
	}
	return -1
}
