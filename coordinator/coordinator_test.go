package coordinator

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/firnid/firn/segment"
)

func TestSpecSlotOrder(t *testing.T) {
	s := Spec{Generator: "g", Layout: "l", WorkerLimit: 3, DatacenterLimit: 2, Datacenter: -1}
	want := []Slot{{0, 0}, {0, 1}, {0, 2}, {1, 0}, {1, 1}, {1, 2}, {0, 0}}
	for i, w := range want {
		if got := s.SlotAt(uint64(i)); got != w {
			t.Fatalf("SlotAt(%d) = %v, want %v", i, got, w)
		}
		if i < 6 && s.Index(w) != uint64(i) {
			t.Fatalf("Index(%v) = %d, want %d", w, s.Index(w), i)
		}
	}
	s.Datacenter = 1
	if s.Slots() != 3 || s.SlotAt(4) != (Slot{1, 1}) {
		t.Fatalf("fixed datacenter: Slots %d SlotAt(4) %v", s.Slots(), s.SlotAt(4))
	}
}

func TestSpecValidate(t *testing.T) {
	ok := Spec{Generator: "g", Layout: "l", WorkerLimit: 1024, DatacenterLimit: 1, Datacenter: -1, MaxFloor: 0, LocalFloor: -1}
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
	big := ok
	big.WorkerLimit, big.DatacenterLimit = 1<<20, 1<<10
	if err := big.Validate(); !errors.Is(err, ErrInvalidSpec) || !strings.Contains(err.Error(), "exceed") {
		t.Fatalf("huge slot space: %v", err)
	}
}

func TestTypedErrors(t *testing.T) {
	ex := &ExhaustedError{Generator: "g", Limit: 2, Live: []SlotState{{Slot: Slot{0, 1}, Heartbeat: Heartbeat{Node: NodeInfo{Name: "a", Address: "x:1"}}}}}
	if !errors.Is(ex, ErrExhausted) || !strings.Contains(ex.Error(), `"a"`) || !strings.Contains(ex.Error(), "limit 2") {
		t.Fatalf("ExhaustedError: %v", ex)
	}
	lm := &LayoutMismatchError{Generator: "g", Pinned: "P", Wanted: "W"}
	if !errors.Is(lm, ErrLayoutMismatch) || !strings.Contains(lm.Error(), `"P"`) || !strings.Contains(lm.Error(), `"W"`) {
		t.Fatalf("LayoutMismatchError: %v", lm)
	}
	rb := &RolledBackError{Generator: "g", Seen: 1, Acked: 2}
	if !errors.Is(rb, ErrRolledBack) || !strings.HasPrefix(rb.Error(), "coordinator state rolled back") {
		t.Fatalf("RolledBackError: %v", rb)
	}
	if !errors.Is(&NameInUseError{Name: "n"}, ErrNameInUse) {
		t.Fatal("NameInUseError does not match ErrNameInUse")
	}
}

func TestLazyConnectsInTheBackground(t *testing.T) {
	var mu sync.Mutex
	tries := 0
	var real Backend
	dial := func(context.Context) (Backend, error) {
		mu.Lock()
		defer mu.Unlock()
		tries++
		if real == nil {
			return nil, errors.New("connection refused")
		}
		return real, nil
	}
	l := NewLazy(dial, 5*time.Millisecond, errors.New("first: connection refused"))
	_, err := l.Peers(context.Background())
	if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "connection refused") {
		t.Fatalf("Peers = %v, want ErrUnavailable naming the cause", err)
	}
	mu.Lock()
	real = closedCoordinator{}
	mu.Unlock()
	deadline := time.Now().Add(5 * time.Second)
	for {
		if _, err := l.Peers(context.Background()); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("never connected")
		}
		time.Sleep(5 * time.Millisecond)
	}
	mu.Lock()
	if tries < 1 {
		t.Fatal("no dial")
	}
	mu.Unlock()
	l.Close()
	if _, err := l.Peers(context.Background()); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("after Close: %v", err)
	}
}

// TestLazyCloseDuringDial: Close cancels the dial in progress and returns
// without waiting for it, whether the dial honours its context or hangs
// regardless (each dial below blocks until cancelled or released after
// Close returned: a Close that waited for it would never return); a
// coordinator such a dial returns after Close is closed at once.
func TestLazyCloseDuringDial(t *testing.T) {
	closeWithin := func(t *testing.T, l *Lazy) {
		t.Helper()
		ret := make(chan struct{})
		go func() {
			l.Close()
			close(ret)
		}()
		select {
		case <-ret:
		case <-time.After(2 * time.Second):
			t.Fatal("Close did not return within 2s while a dial was in progress")
		}
		if _, err := l.Peers(context.Background()); !errors.Is(err, ErrUnavailable) {
			t.Fatalf("after Close: %v, want ErrUnavailable", err)
		}
	}

	t.Run("dial honours its context", func(t *testing.T) {
		started, cancelled := make(chan struct{}), make(chan struct{})
		l := NewLazy(func(ctx context.Context) (Backend, error) {
			close(started)
			<-ctx.Done()
			close(cancelled)
			return nil, ctx.Err()
		}, time.Millisecond, errors.New("first: connection refused"))
		<-started
		closeWithin(t, l)
		select {
		case <-cancelled:
		case <-time.After(time.Second):
			t.Fatal("the dial's context was not cancelled by Close")
		}
	})

	t.Run("dial ignores its context", func(t *testing.T) {
		started, release := make(chan struct{}), make(chan struct{})
		closed := make(chan struct{})
		l := NewLazy(func(context.Context) (Backend, error) {
			close(started)
			<-release
			return closeRecorder{closed}, nil
		}, time.Millisecond, errors.New("first: connection refused"))
		<-started
		closeWithin(t, l)
		close(release)
		select {
		case <-closed:
		case <-time.After(2 * time.Second):
			t.Fatal("a coordinator dialled after Close was not closed")
		}
	})
}

// closeRecorder closes its channel on Close.
type closeRecorder struct{ ch chan struct{} }

func (closeRecorder) Acquire(context.Context, Spec, NodeInfo) (Lease, error) { return nil, nil }
func (closeRecorder) Workers(context.Context, string) ([]SlotState, error)   { return nil, nil }
func (closeRecorder) ForceRelease(context.Context, string, Slot) error       { return nil }
func (closeRecorder) Bump(context.Context, BumpSpec) (BumpResult, error)     { return BumpResult{}, nil }
func (closeRecorder) MarkRestored(context.Context, RestoreEvidence) error    { return nil }
func (closeRecorder) Generators(context.Context) ([]GeneratorState, error)   { return nil, nil }
func (closeRecorder) Peers(context.Context) ([]PeerBeat, error)              { return nil, nil }
func (c closeRecorder) Close() error                                         { close(c.ch); return nil }
func (closeRecorder) CreateDefinition(context.Context, GeneratorDefinition) error {
	return nil
}
func (closeRecorder) RetireDefinition(context.Context, string, string, time.Time) (GeneratorDefinition, error) {
	return GeneratorDefinition{}, nil
}
func (closeRecorder) Definitions(context.Context) ([]GeneratorDefinition, error) { return nil, nil }
func (closeRecorder) ReadCounter(context.Context, CounterSpec) (CounterRecord, error) {
	return CounterRecord{}, nil
}
func (closeRecorder) SwapCounter(context.Context, CounterSpec, CounterRecord, segment.Counter) (CounterRecord, error) {
	return CounterRecord{}, nil
}
func (closeRecorder) BumpCounter(context.Context, CounterSpec, uint64) (CounterBump, error) {
	return CounterBump{}, nil
}

func TestRestoreEvidence(t *testing.T) {
	at := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	ev := RestoreEvidence{Generator: "orders", Slot: Slot{Datacenter: 1, Worker: 7}, Acked: 5000, Shown: 3000, At: at,
		Node: NodeInfo{Name: "node-a", InstanceID: "inst-a", Address: "10.0.0.1:7300"}}
	if ev.Gap() != 2000 {
		t.Fatalf("Gap = %d, want 2000", ev.Gap())
	}
	absent := ev
	absent.Shown = -1
	if absent.Gap() != 5001 {
		t.Fatalf("Gap with nothing shown = %d, want 5001", absent.Gap())
	}
	err := error(&RestoredError{Evidence: ev})
	if !errors.Is(err, ErrRestored) || errors.Is(err, ErrRolledBack) {
		t.Fatalf("RestoredError matches ErrRestored %v, ErrRolledBack %v", errors.Is(err, ErrRestored), errors.Is(err, ErrRolledBack))
	}
	for _, want := range []string{"coordinator state restored from an older snapshot", `"orders"`, "dc=1 worker=7", "5000", "3000",
		`"node-a"`, "inst-a", "10.0.0.1:7300", "2026-12-01T10:00:00Z", "run firn coordinator bump --generator orders --by D", "2000"} {
		if !strings.Contains(err.Error(), want) {
			t.Fatalf("RestoredError %q lacks %q", err, want)
		}
	}
	got, derr := DecodeRestore("k", EncodeRestore(ev))
	if derr != nil || got != ev {
		t.Fatalf("marker round trip: %+v, %v", got, derr)
	}
	if _, derr := DecodeRestore("/x/restored", []byte("{")); !errors.Is(derr, ErrRestored) || !strings.Contains(derr.Error(), "/x/restored") {
		t.Fatalf("unreadable marker: %v, want ErrRestored naming the key", derr)
	}
	if err := (RestoreEvidence{Generator: "g", Acked: 5, Shown: 5}).Validate(); !errors.Is(err, ErrInvalidSpec) {
		t.Fatalf("evidence without a gap: %v, want ErrInvalidSpec", err)
	}

	b := BumpSpec{Generator: "orders", By: 100, Now: 50, MaxTime: 1000}
	if f, err := b.BumpFloor(800, nil); err != nil || f != 900 {
		t.Fatalf("BumpFloor(800) = %d, %v; want 900", f, err)
	}
	if _, err := b.BumpFloor(901, nil); !errors.Is(err, ErrInvalidSpec) || !strings.Contains(err.Error(), "1000") {
		t.Fatalf("BumpFloor past MaxTime: %v, want ErrInvalidSpec naming 1000", err)
	}
	small := ev
	small.Acked, small.Shown = 300, 100
	if _, err := b.BumpFloor(0, &small); !errors.Is(err, ErrInvalidSpec) || !strings.Contains(err.Error(), "gap of 200") || !strings.Contains(err.Error(), `"orders"`) {
		t.Fatalf("bump below the marker's gap: %v, want ErrInvalidSpec naming the gap and the generator", err)
	}
	// A restored coordinator that shows the worker at zero (a lease taken
	// and released before its first reservation, then snapshotted) asks a
	// bump that lifts the floor above Acked, not one of Acked - 0 units.
	zero := ev
	zero.Acked, zero.Shown = 5000, 0
	near := BumpSpec{Generator: "orders", By: 10, Now: 4990, MaxTime: 1 << 40}
	if got := zero.MinBump(4990); got != 10 {
		t.Fatalf("MinBump with the worker shown at zero = %d, want 10 (a floor of 5000)", got)
	}
	if f, err := near.BumpFloor(0, &zero); err != nil || f < zero.Acked {
		t.Fatalf("bump by 10 at 4990 over a marker acked at 5000: floor %d, %v; want a floor at 5000 or above", f, err)
	}
	near.By = 9
	if _, err := near.BumpFloor(0, &zero); !errors.Is(err, ErrInvalidSpec) {
		t.Fatalf("bump by 9 at 4990 over a marker acked at 5000: %v, want ErrInvalidSpec (floor 4999 is below it)", err)
	}
	if got := zero.MinBump(6000); got != 1 {
		t.Fatalf("MinBump once the clock passed what was acknowledged = %d, want 1", got)
	}
	// A segment generator's counter marker: raising reservations and the
	// floor leaves the counter where the restore left it, so the bump
	// that would clear the marker is refused, by any margin.
	counter := ev
	counter.Counter, counter.Acked, counter.Shown = true, 9000, 4000
	wide := BumpSpec{Generator: "orders", By: 1 << 20, Now: 50, MaxTime: 1 << 40}
	if _, err := wide.BumpFloor(0, &counter); !errors.Is(err, ErrInvalidSpec) || !strings.Contains(err.Error(), "counter") {
		t.Fatalf("a reservation bump over a counter's marker: %v, want ErrInvalidSpec naming the counter", err)
	}
	for _, bad := range []BumpSpec{{Generator: "g", By: 0, MaxTime: 1}, {Generator: "g", By: 1, Now: -1, MaxTime: 1},
		{Generator: "g", By: 1, MaxTime: 0}, {Generator: "a/b", By: 1, MaxTime: 1}} {
		if err := bad.Validate(); !errors.Is(err, ErrInvalidSpec) {
			t.Fatalf("BumpSpec %+v: %v, want ErrInvalidSpec", bad, err)
		}
	}
}

// closedCoordinator answers Peers with nothing.
type closedCoordinator struct{ Backend }

func (closedCoordinator) Peers(context.Context) ([]PeerBeat, error) { return nil, nil }
func (closedCoordinator) Close() error                              { return nil }

func TestPinCheckAndOwnerRecord(t *testing.T) {
	spec := Spec{Generator: "g", Layout: "time=41,dc=5,worker=5,seq=12,unit=1ms,epoch=2010-11-04T01:42:54.657Z", Datacenter: -1}
	p := NewPin(spec)
	if err := p.Check(spec); err != nil || len(p.Incarnation) != 32 || NewPin(spec).Incarnation == p.Incarnation {
		t.Fatalf("NewPin = %+v, Check = %v", p, err)
	}
	other := spec
	other.Layout = "compact"
	var lm *LayoutMismatchError
	if err := p.Check(other); !errors.As(err, &lm) || !strings.Contains(err.Error(), "compact") || !strings.Contains(err.Error(), "time=41") {
		t.Fatalf("layout mismatch: %v", err)
	}
	p.Schema = SchemaVersion + 1
	if err := p.Check(spec); !errors.Is(err, ErrSchemaTooNew) {
		t.Fatalf("newer schema: %v", err)
	}
	hb := Heartbeat{Node: NodeInfo{Name: "n", InstanceID: "i", Address: "a:1", StartTime: time.Unix(5, 0).UTC()}, Wall: time.Unix(9, 0).UTC()}
	if got := DecodeOwner(EncodeOwner(hb)).Heartbeat(); got != hb {
		t.Fatalf("owner record round trip: %+v", got)
	}
	if r := DecodeOwner([]byte("{")); r.Name != "?" {
		t.Fatalf("unreadable record: %+v", r)
	}
}

// adminRecorder records which admin calls reach it.
type adminRecorder struct {
	Backend
	calls []string
}

func (a *adminRecorder) Workers(context.Context, string) ([]SlotState, error) {
	a.calls = append(a.calls, "Workers")
	return nil, nil
}
func (a *adminRecorder) ForceRelease(context.Context, string, Slot) error {
	a.calls = append(a.calls, "ForceRelease")
	return nil
}
func (a *adminRecorder) Bump(context.Context, BumpSpec) (BumpResult, error) {
	a.calls = append(a.calls, "Bump")
	return BumpResult{}, nil
}
func (a *adminRecorder) Generators(context.Context) ([]GeneratorState, error) {
	a.calls = append(a.calls, "Generators")
	return nil, nil
}
func (a *adminRecorder) Close() error { return nil }

// TestLazyAdmin: Lazy is an Admin too; until it connects every admin call
// fails with ErrUnavailable, then each reaches the dialled backend.
func TestLazyAdmin(t *testing.T) {
	rec := &adminRecorder{}
	ready := make(chan struct{})
	l := NewLazy(func(ctx context.Context) (Backend, error) {
		select {
		case <-ready:
			return rec, nil
		default:
			return nil, errors.New("connection refused")
		}
	}, time.Millisecond, errors.New("first: connection refused"))
	defer l.Close()
	var a Admin = l
	ctx := context.Background()
	if _, err := a.Workers(ctx, "g"); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("Workers before connecting: %v, want ErrUnavailable", err)
	}
	close(ready)
	for i := 0; ; i++ {
		if _, err := a.Generators(ctx); err == nil {
			break
		}
		if i == 1000 {
			t.Fatal("never connected")
		}
		time.Sleep(5 * time.Millisecond)
	}
	_, _ = a.Workers(ctx, "g")
	_ = a.ForceRelease(ctx, "g", Slot{})
	_, _ = a.Bump(ctx, BumpSpec{})
	if want := []string{"Generators", "Workers", "ForceRelease", "Bump"}; strings.Join(rec.calls, ",") != strings.Join(want, ",") {
		t.Fatalf("calls reaching the backend: %v, want %v", rec.calls, want)
	}
}

// TestCounterEvidenceAtMax: the evidence of a counter used up to MaxID
// (next 2^63) is a valid marker.
func TestCounterEvidenceAtMax(t *testing.T) {
	rb := &CounterRolledBackError{Generator: "g", Seen: segment.Counter{Next: segment.MaxID + 1}, Known: segment.Mark{Seq: 9, Next: segment.MaxID + 1}, Cause: segment.ErrForked}
	ev := rb.Evidence(NodeInfo{Name: "n"}, time.Date(2026, 12, 5, 0, 0, 0, 0, time.UTC))
	if err := ev.Validate(); err != nil || ev.Acked < 0 || ev.Shown < 0 {
		t.Fatalf("evidence %+v: %v", ev, err)
	}
}
