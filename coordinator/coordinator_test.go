package coordinator

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"
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
	ex := &ExhaustedError{Generator: "g", Limit: 2, Live: []Holder{{Slot: Slot{0, 1}, Heartbeat: Heartbeat{Node: NodeInfo{Name: "a", Address: "x:1"}}}}}
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
	var real Coordinator
	dial := func() (Coordinator, error) {
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

// closedCoordinator answers Peers with nothing.
type closedCoordinator struct{ Coordinator }

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
