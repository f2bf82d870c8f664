package memory_test

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/firnid/firn/clockguard"
	"github.com/firnid/firn/coordinator"
	"github.com/firnid/firn/coordinator/memory"
	"github.com/firnid/firn/internal/testing/coordtest"
)

// testTTL is the session TTL of the harness's stores: short, since the
// frozen-holder cases wait multiples of it (in real time outside a bubble).
const testTTL = 2 * time.Second

// backend runs the coordtest cases on memory stores. Dial reaches a store
// by its endpoint name in this process only: children are goroutines
// (cluster implements coordtest.InProcessCluster).
type backend struct{ ttl time.Duration }

var (
	storesMu sync.Mutex
	stores   = map[string]*memory.Store{}
	storeSeq atomic.Int64
)

func (b backend) Name() string { return "memory" }

func (b backend) NewCluster(t testing.TB) coordtest.Cluster {
	s := memory.New(memory.Config{TTL: b.ttl, Timeout: 500 * time.Millisecond})
	name := fmt.Sprintf("memory-%d", storeSeq.Add(1))
	storesMu.Lock()
	stores[name] = s
	storesMu.Unlock()
	t.Cleanup(func() {
		storesMu.Lock()
		delete(stores, name)
		storesMu.Unlock()
	})
	return &cluster{s: s, name: name}
}

func (b backend) Dial(endpoint string, clock clockguard.Clock) (coordinator.Coordinator, error) {
	storesMu.Lock()
	s := stores[endpoint]
	storesMu.Unlock()
	if s == nil {
		return nil, fmt.Errorf("%w: no memory store %q in this process", coordinator.ErrUnavailable, endpoint)
	}
	return s.Connect(clock), nil
}

type cluster struct {
	s    *memory.Store
	name string
}

var _ coordtest.InProcessCluster = (*cluster)(nil)

func (c *cluster) Connect(t testing.TB, clock clockguard.Clock) coordinator.Backend {
	cl := c.s.Connect(clock)
	t.Cleanup(func() { cl.Close() })
	return cl
}

func (c *cluster) ConnectChild(t testing.TB, clock clockguard.Clock) (coordinator.Coordinator, coordtest.Freezer) {
	cl := c.s.Connect(clock)
	t.Cleanup(func() { cl.Close() })
	return cl, cl
}

func (c *cluster) Endpoint() string   { return c.name }
func (c *cluster) TTL() time.Duration { return c.s.TTL() }

// Expire ends the session behind l now, as etcd's revoke does: every lease
// of its client goes with it.
func (c *cluster) Expire(t testing.TB, l coordinator.Lease) {
	t.Helper()
	cl := memory.ClientOf(l)
	if cl == nil {
		t.Fatalf("memory: Expire: %T is not a memory lease", l)
	}
	cl.Expire()
}

func (c *cluster) Kill(t testing.TB, co coordinator.Coordinator) {
	t.Helper()
	cl, ok := co.(*memory.Client)
	if !ok {
		t.Fatalf("memory: Kill: %T is not a memory client", co)
	}
	cl.Kill()
}

func (c *cluster) SetReserved(t testing.TB, generator string, slot coordinator.Slot, r int64) {
	c.s.SetReserved(generator, slot, r)
}

func (c *cluster) Reserved(t testing.TB, generator string, slot coordinator.Slot) int64 {
	return c.s.Reserved(generator, slot)
}

func (c *cluster) SetDefinitionRecord(t testing.TB, generator string, rec []byte) {
	c.s.SetDefinitionRecord(generator, rec)
}

func (c *cluster) Revision(t testing.TB) int64 { return c.s.Revision() }

// TestHarness runs the shared cases in real time.
func TestHarness(t *testing.T) { coordtest.Run(t, backend{ttl: testTTL}) }

// TestHarnessVirtual runs each shared case in a testing/synctest bubble,
// so in virtual time: every timer the store and its clients use is a Go
// timer.
func TestHarnessVirtual(t *testing.T) {
	for _, c := range coordtest.Cases() {
		t.Run(c.Name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) { c.Fn(t, backend{ttl: testTTL}) })
		})
	}
}

func TestFenceReacquire(t *testing.T) { coordtest.FenceReacquire(t, backend{ttl: testTTL}) }

func TestFenceCounter(t *testing.T) { coordtest.FenceCounter(t, backend{ttl: testTTL}) }

func TestFenceTakeBackFrozen(t *testing.T) { coordtest.FenceTakeBackFrozen(t, backend{ttl: testTTL}) }

// TestFenceTakeBackFrozenVirtual is the take-back fence in virtual time.
func TestFenceTakeBackFrozenVirtual(t *testing.T) {
	synctest.Test(t, func(t *testing.T) { coordtest.FenceTakeBackFrozen(t, backend{ttl: testTTL}) })
}

// TestDecisive: no ID repeats while holders churn their leases with a
// 200 ms reservation window.
func TestDecisive(t *testing.T) {
	coordtest.Decisive(t, backend{ttl: testTTL}, coordtest.DecisiveOptions{})
}
