package coordinator

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/firnid/firn/segment"
)

// Lazy is a Backend whose connection is made in the background, again
// and again until it succeeds, so that a node whose coordinator is down when
// it starts stays up, not serving, with the reason in its state (every call
// returns ErrUnavailable naming the cause at once), instead of exiting.
type Lazy struct {
	mu      sync.Mutex
	c       Backend
	lastErr error
	closed  bool
	cancel  context.CancelFunc // ends the dial in progress and the loop
	done    chan struct{}
}

var _ Backend = (*Lazy)(nil)

// lazyCloseWait bounds how long Close waits for the dialling goroutine to
// end: a dial that ignores its context is left to finish on its own (a
// coordinator it returns after Close is closed at once).
const lazyCloseWait = 50 * time.Millisecond

// NewLazy returns a Backend that dials in the background every backoff
// until dial succeeds; until then calls fail with ErrUnavailable wrapping
// the last dial error (first the given one). dial's context is cancelled
// by Close.
func NewLazy(dial func(context.Context) (Backend, error), backoff time.Duration, first error) *Lazy {
	ctx, cancel := context.WithCancel(context.Background())
	l := &Lazy{cancel: cancel, done: make(chan struct{})}
	l.lastErr = unreachable(first)
	go func() {
		defer close(l.done)
		for {
			select {
			case <-ctx.Done():
				return
			case <-time.After(backoff):
			}
			c, err := dial(ctx)
			l.mu.Lock()
			if l.closed {
				l.mu.Unlock()
				if err == nil && c != nil {
					c.Close()
				}
				return
			}
			if err == nil && c != nil {
				l.c, l.lastErr = c, nil
				l.mu.Unlock()
				return
			}
			if err == nil {
				err = errors.New("dial returned no coordinator")
			}
			l.lastErr = unreachable(err)
			l.mu.Unlock()
		}
	}()
	return l
}

func unreachable(err error) error {
	if errors.Is(err, ErrUnavailable) {
		return err
	}
	return fmt.Errorf("%w: cannot reach the coordinator: %w", ErrUnavailable, err)
}

func (l *Lazy) get() (Backend, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil, fmt.Errorf("%w: coordinator closed", ErrUnavailable)
	}
	if l.c != nil {
		return l.c, nil
	}
	return nil, l.lastErr
}

// Acquire implements Coordinator.
func (l *Lazy) Acquire(ctx context.Context, spec Spec, node NodeInfo) (Lease, error) {
	c, err := l.get()
	if err != nil {
		return nil, err
	}
	return c.Acquire(ctx, spec, node)
}

// Workers implements Admin.
func (l *Lazy) Workers(ctx context.Context, generator string) ([]SlotState, error) {
	c, err := l.get()
	if err != nil {
		return nil, err
	}
	return c.Workers(ctx, generator)
}

// ForceRelease implements Admin.
func (l *Lazy) ForceRelease(ctx context.Context, generator string, slot Slot) error {
	c, err := l.get()
	if err != nil {
		return err
	}
	return c.ForceRelease(ctx, generator, slot)
}

// Bump implements Admin.
func (l *Lazy) Bump(ctx context.Context, b BumpSpec) (BumpResult, error) {
	c, err := l.get()
	if err != nil {
		return BumpResult{}, err
	}
	return c.Bump(ctx, b)
}

// MarkRestored implements Coordinator.
func (l *Lazy) MarkRestored(ctx context.Context, ev RestoreEvidence) error {
	c, err := l.get()
	if err != nil {
		return err
	}
	return c.MarkRestored(ctx, ev)
}

// ReadCounter implements Counters.
func (l *Lazy) ReadCounter(ctx context.Context, spec CounterSpec) (CounterRecord, error) {
	c, err := l.get()
	if err != nil {
		return CounterRecord{}, err
	}
	return c.ReadCounter(ctx, spec)
}

// SwapCounter implements Counters.
func (l *Lazy) SwapCounter(ctx context.Context, spec CounterSpec, prev CounterRecord, next segment.Counter) (CounterRecord, error) {
	c, err := l.get()
	if err != nil {
		return CounterRecord{}, err
	}
	return c.SwapCounter(ctx, spec, prev, next)
}

// BumpCounter implements Counters.
func (l *Lazy) BumpCounter(ctx context.Context, spec CounterSpec, by uint64) (CounterBump, error) {
	c, err := l.get()
	if err != nil {
		return CounterBump{}, err
	}
	return c.BumpCounter(ctx, spec, by)
}

// Generators implements Admin.
func (l *Lazy) Generators(ctx context.Context) ([]GeneratorState, error) {
	c, err := l.get()
	if err != nil {
		return nil, err
	}
	return c.Generators(ctx)
}

// CreateDefinition implements Definitions.
func (l *Lazy) CreateDefinition(ctx context.Context, d GeneratorDefinition) error {
	c, err := l.get()
	if err != nil {
		return err
	}
	return c.CreateDefinition(ctx, d)
}

// RetireDefinition implements Definitions.
func (l *Lazy) RetireDefinition(ctx context.Context, name, why string, at time.Time) (GeneratorDefinition, error) {
	c, err := l.get()
	if err != nil {
		return GeneratorDefinition{}, err
	}
	return c.RetireDefinition(ctx, name, why, at)
}

// Definitions implements Definitions.
func (l *Lazy) Definitions(ctx context.Context) ([]GeneratorDefinition, error) {
	c, err := l.get()
	if err != nil {
		return nil, err
	}
	return c.Definitions(ctx)
}

// Peers implements Coordinator.
func (l *Lazy) Peers(ctx context.Context) ([]PeerBeat, error) {
	c, err := l.get()
	if err != nil {
		return nil, err
	}
	return c.Peers(ctx)
}

// Close implements Coordinator. It cancels a dial in progress and returns
// promptly even if that dial does not end (see lazyCloseWait).
func (l *Lazy) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	l.closed = true
	c := l.c
	l.mu.Unlock()
	l.cancel()
	select {
	case <-l.done:
	case <-time.After(lazyCloseWait):
	}
	if c != nil {
		return c.Close()
	}
	return nil
}
