package coordinator

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/firnid/firn/clockguard"
)

// scriptLease is an in-memory Lease for the Reserver's pure logic: each
// Reserve returns the next scripted error (nil: acknowledged).
type scriptLease struct {
	mu       sync.Mutex
	errs     []error
	calls    []int64
	reserved int64
	events   *[]string
	done     chan struct{}
}

func (s *scriptLease) WorkerID() uint64      { return 3 }
func (s *scriptLease) Datacenter() uint64    { return 1 }
func (s *scriptLease) Slot() Slot            { return Slot{Datacenter: 1, Worker: 3} }
func (s *scriptLease) ReadReserved() int64   { return -1 }
func (s *scriptLease) GeneratorFloor() int64 { return -1 }
func (s *scriptLease) Floor() int64          { return -1 }
func (s *scriptLease) Incarnation() string   { return "x" }
func (s *scriptLease) Done() <-chan struct{} { return s.done }
func (s *scriptLease) Ctx() context.Context  { return context.Background() }
func (s *scriptLease) Release(context.Context, int64) error {
	return nil
}
func (s *scriptLease) Assured() time.Duration { return time.Hour }

func (s *scriptLease) Reserved() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.reserved
}
func (s *scriptLease) Reserve(_ context.Context, until int64, _ Heartbeat) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls = append(s.calls, until)
	*s.events = append(*s.events, fmt.Sprintf("reserve %d", until))
	var err error
	if len(s.errs) > 0 {
		err, s.errs = s.errs[0], s.errs[1:]
	}
	if err == nil {
		s.reserved = max(s.reserved, until)
	}
	return err
}

type recJournal struct {
	events *[]string
	fail   error
	acked  []int64
}

func (j *recJournal) BeforeReserve(_ Slot, until int64) error {
	*j.events = append(*j.events, fmt.Sprintf("journal %d", until))
	return j.fail
}
func (j *recJournal) Acked(_ Slot, r int64) { j.acked = append(j.acked, r) }

func newTestReserver(t *testing.T, l *scriptLease, j Journal, now, logical *int64, gate func(int64) int64) (*Reserver, *[]int64) {
	t.Helper()
	var acks []int64
	cfg := ReserverConfig{
		Lease: l, Node: NodeInfo{Name: "n"}, Clock: clockguard.NewFake(time.Unix(0, 0)),
		Now: func() int64 { return *now }, Logical: func() int64 { return *logical },
		Gate: gate, OnAck: func(r int64) { acks = append(acks, r) }, Window: 100, MaxUntil: 10_000,
		Interval: time.Millisecond,
	}
	if j != nil {
		cfg.Journal = j
	}
	r, err := NewReserver(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return r, &acks
}

func TestReserverTarget(t *testing.T) {
	for _, tc := range []struct {
		name         string
		now, logical int64
		gate         func(int64) int64
		want         int64
	}{
		{"now ahead", 500, 100, nil, 600},
		{"L ahead", 500, 900, nil, 1000},
		{"capped at the layout's end", 9990, 0, nil, 10_000},
		{"gated below a forward step", 5000, 0, func(w int64) int64 { return min(w, 1200) }, 1200},
		{"gate never raises", 500, 0, func(w int64) int64 { return w + 50 }, 600},
	} {
		var ev []string
		l := &scriptLease{events: &ev, done: make(chan struct{})}
		now, lg := tc.now, tc.logical
		r, _ := newTestReserver(t, l, nil, &now, &lg, tc.gate)
		if got := r.Target(); got != tc.want {
			t.Errorf("%s: Target = %d, want %d", tc.name, got, tc.want)
		}
	}
}

func TestReserverStep(t *testing.T) {
	var ev []string
	l := &scriptLease{events: &ev, done: make(chan struct{}),
		errs: []error{nil, fmt.Errorf("%w: timeout", ErrUnavailable), nil}}
	j := &recJournal{events: &ev}
	now, lg := int64(1000), int64(0)
	r, acks := newTestReserver(t, l, j, &now, &lg, nil)
	ctx := context.Background()
	if err := r.Step(ctx); err != nil {
		t.Fatal(err)
	}
	now = 1500
	if err := r.Step(ctx); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("second step: %v, want ErrUnavailable", err)
	}
	now = 2000
	if err := r.Step(ctx); err != nil {
		t.Fatal(err)
	}
	want := []string{"journal 1100", "reserve 1100", "journal 1600", "reserve 1600", "journal 2100", "reserve 2100"}
	if fmt.Sprint(ev) != fmt.Sprint(want) {
		t.Fatalf("events %v, want %v (journal before every reserve)", ev, want)
	}
	// The failed step raised nothing.
	if fmt.Sprint(*acks) != "[1100 2100]" || fmt.Sprint(j.acked) != "[1100 2100]" {
		t.Fatalf("acks %v journal acks %v, want [1100 2100]", *acks, j.acked)
	}
	if r.Writes() != 2 || r.Failures() != 1 {
		t.Fatalf("writes %d failures %d, want 2 and 1", r.Writes(), r.Failures())
	}

	// A journal failure sends nothing.
	j.fail = errors.New("disk full")
	ev = nil
	if err := r.Step(ctx); err == nil {
		t.Fatal("step with a failing journal succeeded")
	}
	if len(ev) != 1 || len(l.calls) != 3 {
		t.Fatalf("after a journal failure events %v, %d reserves: want no reserve sent", ev, len(l.calls))
	}
}

func TestReserverRunStops(t *testing.T) {
	for _, final := range []error{
		fmt.Errorf("%w: fence failed", ErrLeaseLost),
		&RolledBackError{Seen: 1, Acked: 2},
	} {
		var ev []string
		l := &scriptLease{events: &ev, done: make(chan struct{}),
			errs: []error{nil, fmt.Errorf("%w: slow", ErrUnavailable), final, nil, nil}}
		now, lg := int64(10), int64(0)
		r, acks := newTestReserver(t, l, nil, &now, &lg, nil)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := r.Run(ctx)
		cancel()
		if !errors.Is(err, final) {
			t.Fatalf("Run = %v, want %v", err, final)
		}
		if len(l.calls) != 3 || len(*acks) != 1 {
			t.Fatalf("%d reserves and %d acks before stopping on %v, want 3 and 1", len(l.calls), len(*acks), final)
		}
	}
	// A lease that is done stops Run.
	var ev []string
	l := &scriptLease{events: &ev, done: make(chan struct{})}
	close(l.done)
	now, lg := int64(10), int64(0)
	r, _ := newTestReserver(t, l, nil, &now, &lg, nil)
	if err := r.Run(context.Background()); !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("Run on a done lease: %v, want ErrLeaseLost", err)
	}
}

func TestReserverConfigRefused(t *testing.T) {
	var ev []string
	l := &scriptLease{events: &ev, done: make(chan struct{})}
	base := ReserverConfig{Lease: l, Clock: clockguard.NewFake(time.Unix(0, 0)), Now: func() int64 { return 0 },
		OnAck: func(int64) {}, Window: 10}
	for _, tc := range []struct {
		field string
		mod   func(*ReserverConfig)
	}{
		{"Lease", func(c *ReserverConfig) { c.Lease = nil }},
		{"Clock", func(c *ReserverConfig) { c.Clock = nil }},
		{"Now", func(c *ReserverConfig) { c.Now = nil }},
		{"OnAck", func(c *ReserverConfig) { c.OnAck = nil }},
		{"Window", func(c *ReserverConfig) { c.Window = 0 }},
	} {
		c := base
		tc.mod(&c)
		if _, err := NewReserver(c); !errors.Is(err, ErrInvalidSpec) || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("%s: %v, want ErrInvalidSpec naming it", tc.field, err)
		}
	}
}

func TestTimingValidate(t *testing.T) {
	if err := DefaultTiming().Validate(); err != nil {
		t.Fatalf("defaults: %v", err)
	}
	bad := DefaultTiming()
	bad.ReservationWindow = 3 * time.Second // < 2×1s + 1.5s
	if err := bad.Validate(); !errors.Is(err, ErrInvalidSpec) {
		t.Fatalf("window 3s with timeout 1s: %v, want refused", err)
	}
	bad.AllowShortWindow = true
	if err := bad.Validate(); err != nil {
		t.Fatalf("with the test-only lift: %v", err)
	}
	if MinWindow(2*time.Second) != 3500*time.Millisecond {
		t.Fatalf("MinWindow(2s) = %v", MinWindow(2*time.Second))
	}
}
