package coordinator

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
)

// LeaseCore is what every backend's lease holds alike: the slot, what was
// read at acquisition (the reservation, the generator floor, the pin's
// incarnation), the reservation last acknowledged, and the lease's end
// (Done, Ctx). It implements every method of Lease but Reserve and
// Release; a backend's lease embeds it, calls InitLeaseCore once, and
// ends it with Finish (or Lost) exactly where its fence or session says
// the lease is gone.
type LeaseCore struct {
	spec        Spec
	slot        Slot
	readR       int64
	genFloor    int64
	floor       int64
	incarnation string
	acked       atomic.Int64

	done   chan struct{}
	once   sync.Once
	ctx    context.Context
	cancel context.CancelFunc
	log    *slog.Logger
	onEnd  func()
}

// InitLeaseCore sets l up for spec's slot, with the reservation readR and
// the generator floor genFloor read at acquisition (-1: none) — its floor
// is the largest of them and spec.LocalFloor — and acked as the
// reservation acknowledged so far. onEnd runs once when the lease ends
// (the backend forgets it), before the end is logged on log.
func (l *LeaseCore) InitLeaseCore(spec Spec, slot Slot, readR, genFloor, acked int64, incarnation string, log *slog.Logger, onEnd func()) {
	l.spec, l.slot, l.readR, l.genFloor, l.incarnation = spec, slot, readR, genFloor, incarnation
	l.floor = max(readR, spec.LocalFloor, genFloor)
	l.acked.Store(acked)
	l.done = make(chan struct{})
	l.ctx, l.cancel = context.WithCancel(context.Background())
	l.log, l.onEnd = log, onEnd
}

func (l *LeaseCore) WorkerID() uint64      { return l.slot.Worker }
func (l *LeaseCore) Datacenter() uint64    { return l.slot.Datacenter }
func (l *LeaseCore) Slot() Slot            { return l.slot }
func (l *LeaseCore) ReadReserved() int64   { return l.readR }
func (l *LeaseCore) GeneratorFloor() int64 { return l.genFloor }
func (l *LeaseCore) Floor() int64          { return l.floor }
func (l *LeaseCore) Incarnation() string   { return l.incarnation }
func (l *LeaseCore) Reserved() int64       { return l.acked.Load() }
func (l *LeaseCore) Done() <-chan struct{} { return l.done }
func (l *LeaseCore) Ctx() context.Context  { return l.ctx }

// Spec is the spec the lease was acquired with.
func (l *LeaseCore) Spec() Spec { return l.spec }

// SetReserved records v as the reservation acknowledged.
func (l *LeaseCore) SetReserved(v int64) { l.acked.Store(v) }

// Finish ends the lease, once: Ctx is cancelled before Done closes (whoever
// sees Done sees Ctx ended), the backend forgets it, and the end is logged
// with why.
func (l *LeaseCore) Finish(why string) {
	l.once.Do(func() {
		l.cancel()
		close(l.done)
		if l.onEnd != nil {
			l.onEnd()
		}
		l.log.Info("worker lease ended", "generator", l.spec.Generator, "slot", l.slot.String(), "reason", why)
	})
}

// IsDone reports whether the lease has ended.
func (l *LeaseCore) IsDone() bool {
	select {
	case <-l.done:
		return true
	default:
		return false
	}
}

// Lost ends the lease (Finish) and returns the error that says so,
// matching ErrLeaseLost.
func (l *LeaseCore) Lost(why string) error {
	l.Finish(why)
	return fmt.Errorf("%w: generator %q %s: %s", ErrLeaseLost, l.spec.Generator, l.slot, why)
}
