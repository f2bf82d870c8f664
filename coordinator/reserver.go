package coordinator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/firnid/firn/clockguard"
)

// Journal is where the Reserver makes a reservation durable on the node
// before sending it, and records what the coordinator acknowledged
// (datadir's Gen implements it).
type Journal interface {
	// BeforeReserve durably records until as the node's last
	// reservation; the Reserve is sent only if it returns nil.
	BeforeReserve(slot Slot, until int64) error
	// Acked records r as acknowledged for slot.
	Acked(slot Slot, r int64)
}

// ReserverConfig configures a Reserver. Times are in the generator's time
// field units (opaque int64 to the coordinator; the caller converts).
type ReserverConfig struct {
	// Lease to keep reserved. Required.
	Lease Lease
	// Node is the identity the heartbeat carries.
	Node NodeInfo
	// Clock gives the heartbeat's wall reading. Required.
	Clock clockguard.Clock
	// Now returns the clock's current time in units. Required.
	Now func() int64
	// Logical returns the generator's logical time L (its Highest or
	// Logical); nil means L is ignored.
	Logical func() int64
	// Gate, when set, returns the largest reservation allowed for a
	// wanted one (<= wanted): after a forward clock step not yet
	// confirmed, it holds the reservation below the step.
	Gate func(wanted int64) int64
	// Journal, when set, persists each reservation before it is sent.
	Journal Journal
	// OnAck receives each acknowledged reservation (the generator's
	// SetReserved). Required.
	OnAck func(r int64)
	// Window is how far ahead of max(L, now) to reserve, in units (> 0).
	Window int64
	// MaxUntil caps every reservation (the layout's last time); 0 means
	// no cap.
	MaxUntil int64
	// Interval between writes; default 1 s. Every write carries a
	// heartbeat, so one is written at idle too.
	Interval time.Duration
	// RetryInterval is Run's wait after a write that failed; default
	// Interval/5.
	RetryInterval time.Duration
	// CallTimeout bounds one Reserve; default 3 s (a call and its retry
	// on a 1 s coordinator timeout, plus slack).
	CallTimeout time.Duration
	// Wake, when set, makes Run write at once when it receives (after a
	// clock step, the reservation may no longer cover the clock).
	Wake <-chan struct{}
	// BeforeStep, when set, runs right before each of Run's writes is
	// sized (a node polls its clock-step detector there, so that a step
	// reaches its clock policy first).
	BeforeStep func()
	// AfterStep, when set, receives the outcome of each of Run's writes
	// and how long it took, before Run decides what to do next.
	AfterStep func(err error, took time.Duration)
	// Logger; default slog.Default().
	Logger *slog.Logger
}

// Reserver keeps one lease's reservation one window ahead of max(L, now),
// writing about once an interval. It never raises the generator's bound
// without an acknowledged, fenced write, and stops at the first sign that
// ownership is gone.
type Reserver struct {
	cfg      ReserverConfig
	log      *slog.Logger
	writes   atomic.Uint64
	failures atomic.Uint64
	gated    atomic.Uint64
}

// NewReserver checks cfg. Errors match ErrInvalidSpec and name the field.
func NewReserver(cfg ReserverConfig) (*Reserver, error) {
	switch {
	case cfg.Lease == nil:
		return nil, fmt.Errorf("%w: ReserverConfig.Lease is nil", ErrInvalidSpec)
	case cfg.Clock == nil:
		return nil, fmt.Errorf("%w: ReserverConfig.Clock is nil", ErrInvalidSpec)
	case cfg.Now == nil:
		return nil, fmt.Errorf("%w: ReserverConfig.Now is nil", ErrInvalidSpec)
	case cfg.OnAck == nil:
		return nil, fmt.Errorf("%w: ReserverConfig.OnAck is nil", ErrInvalidSpec)
	case cfg.Window <= 0:
		return nil, fmt.Errorf("%w: ReserverConfig.Window %d must be positive", ErrInvalidSpec, cfg.Window)
	case cfg.Interval < 0 || cfg.CallTimeout < 0 || cfg.RetryInterval < 0:
		return nil, fmt.Errorf("%w: ReserverConfig.Interval %v, RetryInterval %v and CallTimeout %v must not be negative",
			ErrInvalidSpec, cfg.Interval, cfg.RetryInterval, cfg.CallTimeout)
	}
	if cfg.Interval == 0 {
		cfg.Interval = time.Second
	}
	if cfg.RetryInterval == 0 {
		cfg.RetryInterval = cfg.Interval / 5
	}
	if cfg.CallTimeout == 0 {
		cfg.CallTimeout = 3 * time.Second
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	return &Reserver{cfg: cfg, log: log.With("worker", cfg.Lease.WorkerID(), "datacenter", cfg.Lease.Datacenter())}, nil
}

// Writes is the number of acknowledged reservations.
func (r *Reserver) Writes() uint64 { return r.writes.Load() }

// Failures is the number of reservations not acknowledged (timeouts,
// unavailability, journal errors).
func (r *Reserver) Failures() uint64 { return r.failures.Load() }

// Gated is the number of reservations the Gate held back.
func (r *Reserver) Gated() uint64 { return r.gated.Load() }

// Target is the reservation the Reserver asks for now:
// min(max(L, now) + Window, MaxUntil), then through Gate.
func (r *Reserver) Target() int64 {
	base := r.cfg.Now()
	if r.cfg.Logical != nil {
		base = max(base, r.cfg.Logical())
	}
	t := base + r.cfg.Window
	if r.cfg.MaxUntil > 0 {
		t = min(t, r.cfg.MaxUntil)
	}
	if r.cfg.Gate != nil {
		if g := r.cfg.Gate(t); g < t {
			r.gated.Add(1)
			t = g
		}
	}
	return max(t, 0)
}

// Step makes one reservation: journal, fenced write, then OnAck. A nil
// return means the reservation was acknowledged. ErrLeaseLost and
// ErrRolledBack are final (Run stops on them); any other error leaves the
// bound where it was: ownership is in doubt, so nothing is extended.
func (r *Reserver) Step(ctx context.Context) error {
	l := r.cfg.Lease
	until := r.Target()
	if r.cfg.Journal != nil {
		if err := r.cfg.Journal.BeforeReserve(l.Slot(), until); err != nil {
			r.failures.Add(1)
			return fmt.Errorf("coordinator: journal before reserve: %w", err)
		}
	}
	wall, _ := r.cfg.Clock.Now()
	cctx, cancel := context.WithTimeout(ctx, r.cfg.CallTimeout)
	err := l.Reserve(cctx, until, Heartbeat{Node: r.cfg.Node, Wall: wall})
	cancel()
	if err != nil {
		r.failures.Add(1)
		return err
	}
	acked := l.Reserved()
	if r.cfg.Journal != nil {
		r.cfg.Journal.Acked(l.Slot(), acked)
	}
	r.writes.Add(1)
	r.cfg.OnAck(acked)
	return nil
}

// Run makes a reservation at once and then every Interval (every
// RetryInterval after one that failed, and at once on Wake) until ctx ends
// or the lease is done. It returns the final error: one matching
// ErrLeaseLost or ErrRolledBack, or ctx's error.
func (r *Reserver) Run(ctx context.Context) error {
	t := time.NewTimer(r.cfg.Interval)
	defer t.Stop()
	failing := false
	for {
		if r.cfg.BeforeStep != nil {
			r.cfg.BeforeStep()
		}
		start := time.Now()
		err := r.Step(ctx)
		if r.cfg.AfterStep != nil {
			r.cfg.AfterStep(err, time.Since(start))
		}
		switch {
		case err == nil:
			if failing {
				r.log.Info("reservation extended again", "reserved", r.cfg.Lease.Reserved())
				failing = false
			}
		case errors.Is(err, ErrLeaseLost), errors.Is(err, ErrRolledBack):
			r.log.Warn("reserver stopped", "reason", err.Error())
			return err
		case ctx.Err() != nil:
			return ctx.Err()
		default:
			if !failing {
				r.log.Warn("reservation not extended", "reason", err.Error(), "reserved", r.cfg.Lease.Reserved())
				failing = true
			}
		}
		next := r.cfg.Interval
		if failing {
			next = r.cfg.RetryInterval
		}
		if !t.Stop() {
			select {
			case <-t.C:
			default:
			}
		}
		t.Reset(next)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-r.cfg.Lease.Done():
			return fmt.Errorf("%w: lease done", ErrLeaseLost)
		case <-t.C:
		case <-r.cfg.Wake:
		}
	}
}
