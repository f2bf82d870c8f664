package server_test

import (
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	firnv1 "github.com/firnid/firn/client/firnv1"
	"github.com/firnid/firn/coordinator"
	"github.com/firnid/firn/internal/testing/etcdtest"
)

// TestDefinitionsStartedAtRuntime: a generator that only the coordinator
// defines (`firn generator create`) starts on every running node within a
// read of the definitions — listed by Info and the health service within
// 5 s, serving once its holder's take is through (on a shared coordinator,
// the restore guard) — with no restart; a retired one stops: its calls
// are refused NOT_FOUND naming the retirement and the nodes release its
// workers, while their other generators serve on. A snowflake generator
// and a segment generator, each on two nodes: one on a private
// coordinator (no restore guard), one on a shared one.
func TestDefinitionsStartedAtRuntime(t *testing.T) {
	e := etcdtest.StartEmbedded(t)
	a := startNamedNode(t, "a", e.Endpoints, t.TempDir())
	b := startNamedNode(t, "b", e.Endpoints, t.TempDir(), sharedCoordinator)
	for _, n := range []*tnode{a, b} {
		waitServing(t, n.ids, "", 15*time.Second)
	}
	defs := a.coord.(coordinator.Definitions)
	created := time.Now()
	for _, d := range []coordinator.GeneratorDefinition{
		{Name: "msg", Definition: "snowflake", Created: created},
		{Name: "orders", Definition: "segment,start=1000", Created: created},
	} {
		if err := defs.CreateDefinition(ctx(t), d); err != nil {
			t.Fatal(err)
		}
	}
	// Listed, with a health status, within 5 s: every node, both kinds.
	for _, n := range []*tnode{a, b} {
		for _, gen := range []string{"msg", "orders"} {
			for {
				if listed(t, n.ids, gen) {
					break
				}
				if time.Since(created) > 5*time.Second {
					t.Fatalf("node %s: generator %q not listed 5 s after its definition was stored", n.node.NodeInfo().Name, gen)
				}
				time.Sleep(20 * time.Millisecond)
			}
			if _, err := n.health.Check(ctx(t), &healthpb.HealthCheckRequest{Service: gen}); err != nil {
				t.Fatalf("node %s: the health service does not know %q: %v", n.node.NodeInfo().Name, gen, err)
			}
		}
	}
	// Serving: within 5 s on the private coordinator, within 5 s and the
	// restore guard on the shared one.
	guard := b.cfg.RestoreGuard(b.cfg.Generators[0])
	for _, c := range []struct {
		n      *tnode
		within time.Duration
	}{{a, 5 * time.Second}, {b, 5*time.Second + guard}} {
		for _, gen := range []string{"msg", "orders"} {
			waitServing(t, c.n.ids, gen, c.within-time.Since(created))
		}
		t.Logf("node %s: both serving %v after the definitions were stored (restore guard %v)",
			c.n.node.NodeInfo().Name, time.Since(created).Round(time.Millisecond), c.n.cfg.RestoreGuard(c.n.cfg.Generators[0]))
	}
	// Both nodes issue: distinct workers for msg, distinct numbers for
	// orders from its counter.
	seen := map[uint64]bool{}
	workers := map[uint32]bool{}
	for _, n := range []*tnode{a, b} {
		workers[n.genInfo(t, "msg").GetWorker()] = true
		for _, gen := range []string{"msg", "orders"} {
			resp, err := n.ids.NextIDs(ctx(t), &firnv1.NextIDsRequest{Generator: gen, Count: 100})
			if err != nil {
				t.Fatalf("node %s: NextIDs %s: %v", n.node.NodeInfo().Name, gen, err)
			}
			for _, id := range resp.GetIds() {
				if seen[id] && gen == "orders" {
					t.Fatalf("orders: %d issued twice", id)
				}
				if gen == "orders" {
					if id < 1000 {
						t.Fatalf("orders: %d below the definition's start 1000", id)
					}
					seen[id] = true
				}
			}
		}
	}
	if len(workers) != 2 {
		t.Fatalf("msg: both nodes hold worker %v", workers)
	}
	// Retired: refused NOT_FOUND naming it within a read, the workers
	// released; the default generator serves on.
	admin := a.coord.(coordinator.Admin)
	if _, err := defs.RetireDefinition(ctx(t), "msg", "moved to msg2", time.Now()); err != nil {
		t.Fatal(err)
	}
	retired := time.Now()
	for _, n := range []*tnode{a, b} {
		var err error
		for time.Since(retired) < 5*time.Second {
			if _, err = n.ids.NextID(ctx(t), &firnv1.NextIDRequest{Generator: "msg"}); err != nil {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		wantCode(t, "NextID of the retired generator", err, 5 /* NOT_FOUND */, "retired", "moved to msg2")
		if _, err := n.ids.NextID(ctx(t), &firnv1.NextIDRequest{}); err != nil {
			t.Fatalf("node %s: the default generator after msg retired: %v", n.node.NodeInfo().Name, err)
		}
		resp, err := n.health.Check(ctx(t), &healthpb.HealthCheckRequest{Service: "msg"})
		if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_NOT_SERVING {
			t.Fatalf("node %s: health of the retired generator: %v %v, want NOT_SERVING", n.node.NodeInfo().Name, resp.GetStatus(), err)
		}
	}
	for {
		slots, err := admin.Workers(ctx(t), "msg")
		if err != nil {
			t.Fatal(err)
		}
		live := 0
		for _, s := range slots {
			if s.Live {
				live++
			}
		}
		if live == 0 {
			break
		}
		if time.Since(retired) > 5*time.Second {
			t.Fatalf("msg retired 5 s ago: %d workers still held: %+v", live, slots)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if _, err := a.ids.NextID(ctx(t), &firnv1.NextIDRequest{Generator: "orders"}); err != nil {
		t.Fatalf("orders after msg retired: %v", err)
	}
	// A node started later with the retired generator on its flags starts,
	// refuses it NOT_FOUND, takes no worker for it, and serves the rest.
	c := startNamedNode(t, "c", e.Endpoints, t.TempDir(), generators("default=snowflake", "msg=snowflake"))
	waitServing(t, c.ids, "", 15*time.Second)
	_, err := c.ids.NextID(ctx(t), &firnv1.NextIDRequest{Generator: "msg"})
	wantCode(t, "NextID of a generator retired before the node started", err, 5 /* NOT_FOUND */, "retired", "moved to msg2")
	if slots, err := admin.Workers(ctx(t), "msg"); err != nil {
		t.Fatal(err)
	} else {
		for _, s := range slots {
			if s.Live {
				t.Fatalf("msg, retired: a worker taken by a node started since: %+v", s)
			}
		}
	}
	if !strings.Contains(a.logs.String(), "generator started from the coordinator's definition") {
		t.Fatalf("node a did not log the start of the defined generators")
	}
}

// listed reports whether Info lists the generator.
func listed(t *testing.T, cli firnv1.IDServiceClient, name string) bool {
	t.Helper()
	resp, err := cli.Info(ctx(t), &firnv1.InfoRequest{})
	if err != nil {
		t.Fatalf("Info: %v", err)
	}
	for _, g := range resp.GetGenerators() {
		if g.GetName() == name {
			return true
		}
	}
	return false
}

// TestStoredAllowListWithoutMTLSHolds: a generator stored with an allow
// list (`firn generator create msg snowflake --allow billing`) on a node
// without mTLS can serve no caller — none can be named — so it is held,
// OPERATOR_HOLD naming the missing --tls-client-ca: /readyz 503, health
// NOT_SERVING, and every call refused UNAVAILABLE with that cause, over
// gRPC and HTTP alike. It was ready and SERVING while every call was
// refused PERMISSION_DENIED, blaming the caller for the node's
// configuration. (The flag's equivalent is refused at start.)
func TestStoredAllowListWithoutMTLSHolds(t *testing.T) {
	e := etcdtest.StartEmbedded(t)
	n := startNode(t, e.Endpoints, t.TempDir())
	waitServing(t, n.ids, "", 15*time.Second)
	defs := n.coord.(coordinator.Definitions)
	if err := defs.CreateDefinition(ctx(t), coordinator.GeneratorDefinition{Name: "msg", Definition: "snowflake",
		Allow: []string{"billing"}, Created: time.Now()}); err != nil {
		t.Fatal(err)
	}
	for start := time.Now(); !listed(t, n.ids, "msg"); time.Sleep(20 * time.Millisecond) {
		if time.Since(start) > 10*time.Second {
			t.Fatal("msg not started")
		}
	}
	// Past the start checks and a read of the definitions: still held.
	time.Sleep(3 * time.Second)
	code, body := httpGet(t, n.httpc, n.base+"/readyz?generator=msg")
	if code != 503 || !strings.Contains(body, "OPERATOR_HOLD") || !strings.Contains(body, "--tls-client-ca") {
		t.Errorf("/readyz?generator=msg: %d %s; want 503 OPERATOR_HOLD naming --tls-client-ca", code, body)
	}
	hr, err := n.health.Check(ctx(t), &healthpb.HealthCheckRequest{Service: "msg"})
	if err != nil || hr.GetStatus() != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Errorf("health msg: %v, %v; want NOT_SERVING", hr, err)
	}
	_, err = n.ids.NextID(ctx(t), &firnv1.NextIDRequest{Generator: "msg"})
	wantCode(t, "NextID msg", err, codes.Unavailable, "--tls-client-ca")
	wantInfo(t, "NextID msg", err, "OPERATOR_HOLD", nil)
	wantHTTP(t, n, "/v1/ids?generator=msg", 503, "OPERATOR_HOLD", "--tls-client-ca")
	// The node's other generators serve on.
	if _, err := n.ids.NextID(ctx(t), &firnv1.NextIDRequest{}); err != nil {
		t.Fatalf("NextID default: %v", err)
	}
}
