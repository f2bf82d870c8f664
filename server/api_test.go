package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	firnv1 "github.com/firnid/firn/client/firnv1"
	"github.com/firnid/firn/clockguard"
	"github.com/firnid/firn/coordinator"
	"github.com/firnid/firn/coordinator/etcd"
	"github.com/firnid/firn/generator"
	"github.com/firnid/firn/internal/testing/etcdtest"
	"github.com/firnid/firn/internal/testing/ntptest"
)

type decoded struct {
	ID         string    `json:"id"`
	Generator  string    `json:"generator"`
	Time       time.Time `json:"time"`
	Datacenter uint64    `json:"datacenter"`
	Worker     uint64    `json:"worker"`
	Sequence   uint64    `json:"sequence"`
}

func decodeHTTP(t *testing.T, n *tnode, gen string, id uint64) decoded {
	t.Helper()
	code, body := httpGet(t, n.httpc, fmt.Sprintf("%s/v1/decode/%d?generator=%s", n.base, id, gen))
	if code != 200 {
		t.Fatalf("GET /v1/decode/%d: %d %s", id, code, body)
	}
	var d decoded
	if err := json.Unmarshal([]byte(body), &d); err != nil {
		t.Fatalf("decode body %q: %v", body, err)
	}
	return d
}

// HTTP and gRPC agree: the same generators, the same decoding of the same
// ID, one increasing sequence across both, and /readyz says what Info says.
func TestHTTPAndGRPCAgree(t *testing.T) {
	e := etcdtest.StartEmbedded(t)
	n := startNode(t, e.Endpoints, t.TempDir(), generators("default=snowflake", "user=compact"))
	waitServing(t, n.ids, "default", 10*time.Second)
	waitServing(t, n.ids, "user", 10*time.Second)

	for _, gen := range []string{"default", "user"} {
		info := n.genInfo(t, gen)
		layout, err := generator.ParseLayout(info.GetLayout())
		if err != nil {
			t.Fatalf("Info layout %q: %v", info.GetLayout(), err)
		}
		var seq []uint64
		for i := range 6 {
			if i%2 == 0 {
				code, body := httpGet(t, n.httpc, n.base+"/v1/ids?count=2&generator="+gen)
				if code != 200 {
					t.Fatalf("GET /v1/ids: %d %s", code, body)
				}
				seq = append(seq, parseIDs(t, body, 2)...)
				continue
			}
			resp, err := n.ids.NextIDs(ctx(t), &firnv1.NextIDsRequest{Generator: gen, Count: 2})
			if err != nil {
				t.Fatalf("NextIDs %s: %v", gen, err)
			}
			seq = append(seq, resp.GetIds()...)
		}
		increasing(t, gen+" across HTTP and gRPC", seq)
		for _, id := range []uint64{seq[0], seq[len(seq)-1]} {
			g, err := n.ids.Decode(ctx(t), &firnv1.DecodeRequest{Generator: gen, Id: id})
			if err != nil {
				t.Fatalf("Decode %d: %v", id, err)
			}
			h := decodeHTTP(t, n, gen, id)
			p, err := layout.Decode(id)
			if err != nil {
				t.Fatalf("local decode of %d: %v", id, err)
			}
			if h.ID != strconv.FormatUint(id, 10) || h.Generator != gen ||
				!h.Time.Equal(g.GetTime().AsTime()) || !h.Time.Equal(p.Time) ||
				h.Worker != uint64(g.GetWorker()) || h.Worker != p.Worker || h.Worker != uint64(info.GetWorker()) ||
				h.Datacenter != uint64(g.GetDatacenter()) || h.Datacenter != p.Datacenter ||
				h.Sequence != uint64(g.GetSequence()) || h.Sequence != p.Sequence {
				t.Fatalf("%s ID %d: HTTP %+v, gRPC %v, layout %+v, Info worker %d", gen, id, h, g, p, info.GetWorker())
			}
		}
	}

	// /readyz against Info.
	resp, err := n.ids.Info(ctx(t), &firnv1.InfoRequest{})
	if err != nil {
		t.Fatal(err)
	}
	code, body := httpGet(t, n.httpc, n.base+"/readyz")
	var ready struct {
		Ready      bool `json:"ready"`
		Generators []struct {
			Name    string `json:"name"`
			Default bool   `json:"default"`
			Serving bool   `json:"serving"`
			State   string `json:"state"`
			Reason  string `json:"reason"`
		} `json:"generators"`
	}
	if err := json.Unmarshal([]byte(body), &ready); err != nil {
		t.Fatalf("/readyz body %q: %v", body, err)
	}
	if code != 200 || !ready.Ready || len(ready.Generators) != len(resp.GetGenerators()) {
		t.Fatalf("/readyz %d %s, Info %v", code, body, resp)
	}
	for i, g := range resp.GetGenerators() {
		r := ready.Generators[i]
		if r.Name != g.GetName() || r.Default != g.GetIsDefault() || r.Serving != g.GetServing() ||
			r.State != g.GetState() || r.Reason != g.GetReason() {
			t.Fatalf("/readyz generator %+v, Info %v", r, g)
		}
	}
	// The status page names both generators.
	code, page := httpGet(t, n.httpc, n.base+"/")
	if code != 200 || !strings.Contains(page, "Generator default (default)") || !strings.Contains(page, "Generator user") || !strings.Contains(page, "SERVING") ||
		!strings.Contains(page, "No NTP configured") {
		t.Fatalf("status page %d:\n%s", code, page)
	}
	if code, body := httpGet(t, n.httpc, n.base+"/healthz"); code != 200 {
		t.Fatalf("/healthz %d %s", code, body)
	}
}

// Several named generators on one node: each serves with its own layout
// and its own worker lease in the coordinator.
func TestNamedGeneratorsOwnLeases(t *testing.T) {
	e := etcdtest.StartEmbedded(t)
	n := startNode(t, e.Endpoints, t.TempDir(), generators("default=snowflake", "user=compact"))
	waitServing(t, n.ids, "default", 10*time.Second)
	waitServing(t, n.ids, "user", 10*time.Second)

	resp, err := n.ids.Info(ctx(t), &firnv1.InfoRequest{})
	if err != nil {
		t.Fatal(err)
	}
	gens := resp.GetGenerators()
	if len(gens) != 2 || gens[0].GetName() != "default" || !gens[0].GetIsDefault() ||
		gens[1].GetName() != "user" || gens[1].GetIsDefault() {
		t.Fatalf("Info generators: %v", gens)
	}
	compact, _ := generator.ParseLayout("compact")
	snow, _ := generator.ParseLayout("snowflake")
	if gens[0].GetLayout() != snow.String() || gens[1].GetLayout() != compact.String() {
		t.Fatalf("layouts %q and %q, want %q and %q", gens[0].GetLayout(), gens[1].GetLayout(), snow, compact)
	}

	// An empty generator name is the default one.
	def, err := n.ids.NextID(ctx(t), &firnv1.NextIDRequest{})
	if err != nil {
		t.Fatal(err)
	}
	user, err := n.ids.NextID(ctx(t), &firnv1.NextIDRequest{Generator: "user"})
	if err != nil {
		t.Fatal(err)
	}
	if user.GetId() >= 1<<42 {
		t.Fatalf("user ID %d does not fit compact's 42 bits", user.GetId())
	}
	if def.GetId() < 1<<42 {
		t.Fatalf("default ID %d looks like a compact ID", def.GetId())
	}
	if p, err := compact.Decode(user.GetId()); err != nil || p.Worker != uint64(gens[1].GetWorker()) {
		t.Fatalf("user ID %d decodes to %+v, %v; Info worker %d", user.GetId(), p, err, gens[1].GetWorker())
	}

	// The coordinator shows one live lease per generator, both this node's.
	insp := inspector(t, e.Endpoints, n.cfg.Cluster)
	for i, name := range []string{"default", "user"} {
		holders, err := insp.Workers(ctx(t), name)
		if err != nil {
			t.Fatalf("Workers %s: %v", name, err)
		}
		live := 0
		for _, h := range holders {
			if !h.Live {
				continue
			}
			live++
			if h.Heartbeat.Node.InstanceID != n.node.NodeInfo().InstanceID ||
				h.Slot.Worker != uint64(gens[i].GetWorker()) || h.Slot.Datacenter != uint64(gens[i].GetDatacenter()) {
				t.Fatalf("generator %s: live holder %+v, Info %v, node %+v", name, h, gens[i], n.node.NodeInfo())
			}
		}
		if live != 1 {
			t.Fatalf("generator %s: %d live leases, want 1: %+v", name, live, holders)
		}
	}
}

// inspector is a separate coordinator connection for looking at leases.
func inspector(t *testing.T, endpoints []string, cluster string) coordinator.Admin {
	t.Helper()
	ec := etcd.DefaultConfig()
	ec.Endpoints = endpoints
	ec.Cluster = cluster
	ec.Clock = clockguard.NewSystem()
	ec.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	c, err := etcd.New(ec)
	if err != nil {
		t.Fatalf("inspector: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// Health: service "" follows the default generator, one service per
// generator follows it, NOT_SERVING while not serving.
func TestHealth(t *testing.T) {
	e := etcdtest.StartEmbedded(t)
	ntp := ntptest.NewServer(t)
	ntp.SetOffset(2 * time.Second)
	n := startNode(t, e.Endpoints, t.TempDir(), ntpServers(time.Second, ntp.Addr()),
		generators("default=snowflake", "user=compact"))

	check := func(service string) healthpb.HealthCheckResponse_ServingStatus {
		t.Helper()
		resp, err := n.health.Check(ctx(t), &healthpb.HealthCheckRequest{Service: service})
		if err != nil {
			t.Fatalf("health %q: %v", service, err)
		}
		return resp.GetStatus()
	}
	// want waits, two seconds at most, for every status to be st: a
	// status follows its generator's state as the transition's
	// subscribers run, just after Info can already show the state.
	want := func(st healthpb.HealthCheckResponse_ServingStatus) {
		t.Helper()
		deadline := time.Now().Add(2 * time.Second)
		for _, s := range []string{"", "default", "user"} {
			for got := check(s); got != st; got = check(s) {
				if time.Now().After(deadline) {
					t.Fatalf("health %q: %v, want %v", s, got, st)
				}
				time.Sleep(5 * time.Millisecond)
			}
		}
	}
	waitNotServing(t, n.ids, "default", 5*time.Second)
	// Once both leases are taken, NTP alone keeps the generators out.
	for start := time.Now(); strings.Count(n.logs.String(), `msg="worker acquired"`) < 2; time.Sleep(10 * time.Millisecond) {
		if time.Since(start) > 5*time.Second {
			t.Fatal("the two generators' workers were never acquired")
		}
	}
	want(healthpb.HealthCheckResponse_NOT_SERVING)
	if _, err := n.health.Check(ctx(t), &healthpb.HealthCheckRequest{Service: "nope"}); status.Code(err) != codes.NotFound {
		t.Fatalf("health of an unknown service: %v, want NotFound", err)
	}

	ntp.SetOffset(0)
	waitServing(t, n.ids, "default", 10*time.Second)
	waitServing(t, n.ids, "user", 10*time.Second)
	want(healthpb.HealthCheckResponse_SERVING)

	ntp.SetOffset(-2 * time.Second)
	waitNotServing(t, n.ids, "default", 10*time.Second)
	want(healthpb.HealthCheckResponse_NOT_SERVING)

	// Watch reports a change as it happens.
	wctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	w, err := n.health.Watch(wctx, &healthpb.HealthCheckRequest{Service: "user"})
	if err != nil {
		t.Fatal(err)
	}
	if m, err := w.Recv(); err != nil || m.GetStatus() != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Fatalf("first watch message %v, %v", m, err)
	}
	ntp.SetOffset(0)
	if m, err := w.Recv(); err != nil || m.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("watch after NTP agreed: %v, %v", m, err)
	}
}
