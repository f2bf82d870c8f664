package zookeeper_test

import (
	"testing"
	"time"

	"github.com/firnid/firn/internal/testing/coordtest"
	"github.com/firnid/firn/internal/testing/zktest"
)

// The harness's session timeouts: short on a standalone server, and at
// least 4 s on the ensemble, where a frozen member must be ridden out.
const (
	standaloneTTL = 3 * time.Second
	ensembleTTL   = 4 * time.Second
)

func TestMain(m *testing.M) { coordtest.Main(m, &zktest.Backend{}) }

func standalone(t testing.TB) *zktest.Backend {
	s := zktest.StartStandalone(t)
	return &zktest.Backend{Servers: []string{s.Addr}, TTL: standaloneTTL}
}

func ensemble(t testing.TB) (*zktest.Backend, *zktest.Ensemble) {
	e := zktest.StartEnsemble(t, 3)
	return &zktest.Backend{Servers: e.Addrs(), TTL: ensembleTTL}, e
}

// TestHarness runs the shared cases on a standalone server.
func TestHarness(t *testing.T) { coordtest.Run(t, standalone(t)) }

// TestHarnessEnsemble runs the shared cases on a 3-server ensemble.
func TestHarnessEnsemble(t *testing.T) {
	b, _ := ensemble(t)
	coordtest.Run(t, b)
}

func TestFenceReacquire(t *testing.T) { coordtest.FenceReacquire(t, standalone(t)) }

func TestFenceCounter(t *testing.T) { coordtest.FenceCounter(t, standalone(t)) }

func TestFenceReacquireEnsemble(t *testing.T) {
	b, _ := ensemble(t)
	coordtest.FenceReacquire(t, b)
}

func TestFenceTakeBackFrozen(t *testing.T) { coordtest.FenceTakeBackFrozen(t, standalone(t)) }

func TestFenceTakeBackFrozenEnsemble(t *testing.T) {
	b, _ := ensemble(t)
	coordtest.FenceTakeBackFrozen(t, b)
}

// TestDecisive: no ID repeats while holders churn their leases with a
// 200 ms reservation window, on a standalone server and on an ensemble.
func TestDecisive(t *testing.T) {
	coordtest.Decisive(t, standalone(t), coordtest.DecisiveOptions{})
}

func TestDecisiveEnsemble(t *testing.T) {
	b, _ := ensemble(t)
	coordtest.Decisive(t, b, coordtest.DecisiveOptions{})
}
