package server_test

import (
	"testing"
	"time"

	firnv1 "github.com/firnid/firn/client/firnv1"
	"github.com/firnid/firn/coordinator"
	"github.com/firnid/firn/internal/testing/etcdtest"
)

// TestRetiredGeneratorMetrics: a generator retired in the coordinator
// (`firn generator retire`) stays in the node's list, not serving, held
// DRAINING, for as long as the node runs — exactly what a node that is
// shutting down exports. The alerts (FirnClusterNotServing, critical, and
// FirnNodeNotServing) can tell a retirement from an outage only by
// firn_generator_retired: 1 for the retired generator, 0 for the others.
func TestRetiredGeneratorMetrics(t *testing.T) {
	e := etcdtest.StartEmbedded(t)
	n := startNamedNode(t, "a", e.Endpoints, t.TempDir())
	waitServing(t, n.ids, "", 15*time.Second)
	defs := n.coord.(coordinator.Definitions)
	if err := defs.CreateDefinition(ctx(t), coordinator.GeneratorDefinition{Name: "msg", Definition: "snowflake", Created: time.Now()}); err != nil {
		t.Fatal(err)
	}
	for start := time.Now(); !listed(t, n.ids, "msg"); time.Sleep(20 * time.Millisecond) {
		if time.Since(start) > 5*time.Second {
			t.Fatal("msg not listed 5 s after its definition was stored")
		}
	}
	waitServing(t, n.ids, "msg", 10*time.Second)
	if _, err := defs.RetireDefinition(ctx(t), "msg", "moved to msg2", time.Now()); err != nil {
		t.Fatal(err)
	}
	for start := time.Now(); ; time.Sleep(20 * time.Millisecond) {
		if _, err := n.ids.NextID(ctx(t), &firnv1.NextIDRequest{Generator: "msg"}); err != nil {
			break
		}
		if time.Since(start) > 5*time.Second {
			t.Fatal("msg still serving 5 s after its retirement")
		}
	}
	fams := scrape(t, n.httpc, n.base)
	msg := map[string]string{"generator": "msg"}
	if v := value(t, fams, "firn_serving", msg); v != 0 {
		t.Fatalf("firn_serving{generator=msg} = %v after its retirement, want 0", v)
	}
	if v := value(t, fams, "firn_not_serving", map[string]string{"generator": "msg", "cause": "DRAINING"}); v != 1 {
		t.Fatalf("firn_not_serving{generator=msg,cause=DRAINING} = %v after its retirement, want 1", v)
	}
	if _, ok := sample(fams, "firn_generator_retired", msg); !ok {
		t.Fatalf("/metrics has no firn_generator_retired{generator=\"msg\"}: a retired generator (firn_serving 0, firn_not_serving{cause=\"DRAINING\"} 1) reads as a node shutting down, and FirnClusterNotServing pages for it")
	}
	if v := value(t, fams, "firn_generator_retired", msg); v != 1 {
		t.Fatalf("firn_generator_retired{generator=msg} = %v, want 1", v)
	}
	if v := value(t, fams, "firn_generator_retired", map[string]string{"generator": "default"}); v != 0 {
		t.Fatalf("firn_generator_retired{generator=default} = %v, want 0", v)
	}
}
