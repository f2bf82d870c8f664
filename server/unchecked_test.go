package server_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	firnv1 "github.com/firnid/firn/client/firnv1"
	"github.com/firnid/firn/internal/testing/etcdtest"
	"github.com/firnid/firn/server/core"
)

// The unchecked clock (docs/design.md, Clock policy): a node on an
// external coordinator with no NTP and fewer than three live nodes does not
// serve unless told to, and says why everywhere a refusal is read.

// One node, no NTP, no --unchecked-clock-ok: refused with CLOCK_UNCHECKED
// on gRPC and HTTP, in /readyz, Info, the metrics and the status page. Its
// clock an hour ahead, it reserves nothing past its real time either: its
// worker is not held for the hour, and a bump's floor does not inherit it.
func TestUncheckedClockRefused(t *testing.T) {
	e := etcdtest.StartEmbedded(t)
	n := startNode(t, e.Endpoints, t.TempDir(), checkedClock, faultInjection,
		func(c *core.Config) { c.FaultClockOffset = time.Hour })
	waitNotServing(t, n.ids, "", 10*time.Second)
	// The first reading holds it: not STARTING but the cause itself, at
	// once.
	deadline := time.Now().Add(5 * time.Second)
	for n.genInfo(t, "").GetCause() != "CLOCK_UNCHECKED" && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	g := n.genInfo(t, "")
	if g.GetServing() || g.GetCause() != "CLOCK_UNCHECKED" || !strings.Contains(g.GetReason(), "--unchecked-clock-ok") {
		t.Fatalf("Info: serving %v, cause %q, reason %q; want CLOCK_UNCHECKED naming --unchecked-clock-ok", g.GetServing(), g.GetCause(), g.GetReason())
	}
	resp, err := n.ids.Info(ctx(t), &firnv1.InfoRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if !resp.GetClockUnchecked() || !strings.HasPrefix(resp.GetClockCheck(), "unchecked: not serving") {
		t.Fatalf("Info: clock unchecked %v, check %q", resp.GetClockUnchecked(), resp.GetClockCheck())
	}

	start := time.Now()
	_, err = n.ids.NextIDs(ctx(t), &firnv1.NextIDsRequest{Count: 10})
	if took := time.Since(start); took > time.Second {
		t.Fatalf("refusal took %v", took)
	}
	wantCode(t, "NextIDs", err, codes.Unavailable, "clock unchecked", "no NTP configured", "1 live node", "--ntp", "three nodes", "--unchecked-clock-ok")
	wantInfo(t, "NextIDs", err, "CLOCK_UNCHECKED", map[string]string{"generator": "default", "limit_nodes": "3", "measured_nodes": "1"})
	wantHTTP(t, n, "/v1/ids?count=1", 503, "CLOCK_UNCHECKED", "clock unchecked", "--unchecked-clock-ok")

	code, body := httpGet(t, n.httpc, n.base+"/readyz")
	var ready struct {
		Ready      bool `json:"ready"`
		Generators []struct {
			Cause  string `json:"cause"`
			Reason string `json:"reason"`
		} `json:"generators"`
	}
	if err := json.Unmarshal([]byte(body), &ready); err != nil {
		t.Fatalf("/readyz: %v: %s", err, body)
	}
	if code != 503 || ready.Ready || ready.Generators[0].Cause != "CLOCK_UNCHECKED" || !strings.Contains(ready.Generators[0].Reason, "clock unchecked") {
		t.Fatalf("/readyz %d %s", code, body)
	}

	fams := scrape(t, n.httpc, n.base)
	if v := value(t, fams, "firn_clock_unchecked", nil); v != 1 {
		t.Fatalf("firn_clock_unchecked %v, want 1", v)
	}
	if v := value(t, fams, "firn_not_serving", map[string]string{"generator": "default", "cause": "CLOCK_UNCHECKED"}); v != 1 {
		t.Fatalf("firn_not_serving{cause=CLOCK_UNCHECKED} %v, want 1", v)
	}
	if _, page := httpGet(t, n.httpc, n.base+"/"); !strings.Contains(page, "Clock check: unchecked: not serving") {
		t.Fatalf("the status page does not say the clock is unchecked:\n%s", page)
	}
	if !strings.Contains(n.logs.String(), "CLOCK UNCHECKED: not serving") {
		t.Fatalf("the logs do not say the clock is unchecked:\n%s", n.logs.String())
	}

	// The lease is held, its heartbeat flows, but nothing is reserved past
	// the real clock: the hour ahead is not written.
	time.Sleep(2 * time.Second)
	admin := inspector(t, e.Endpoints, n.cfg.Cluster)
	hs, err := admin.Workers(ctx(t), "default")
	if err != nil {
		t.Fatal(err)
	}
	layout := n.cfg.Generators[0].Layout
	for _, h := range hs {
		if at := layout.UnitStart(h.Reserved + 1); h.Reserved >= 0 && at.After(wallNow().Add(time.Minute)) {
			t.Fatalf("worker %v reserved until %v: the unchecked clock's hour was written", h.Slot, at)
		}
	}
}

// With --unchecked-clock-ok the node serves on it, and says so.
func TestUncheckedClockAccepted(t *testing.T) {
	e := etcdtest.StartEmbedded(t)
	n := startNode(t, e.Endpoints, t.TempDir(), sharedCoordinator) // --unchecked-clock-ok is nodeConfig's
	waitServing(t, n.ids, "", 20*time.Second)                      // after the restore guard
	resp, err := n.ids.Info(ctx(t), &firnv1.InfoRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if !resp.GetClockUnchecked() || !strings.HasPrefix(resp.GetClockCheck(), "unchecked, accepted by --unchecked-clock-ok") {
		t.Fatalf("Info: clock unchecked %v, check %q", resp.GetClockUnchecked(), resp.GetClockCheck())
	}
	if _, err := n.ids.NextIDs(ctx(t), &firnv1.NextIDsRequest{Count: 10}); err != nil {
		t.Fatalf("NextIDs: %v", err)
	}
	fams := scrape(t, n.httpc, n.base)
	if v := value(t, fams, "firn_clock_unchecked", nil); v != 1 {
		t.Fatalf("firn_clock_unchecked %v, want 1", v)
	}
	if v := value(t, fams, "firn_not_serving", map[string]string{"generator": "default", "cause": "CLOCK_UNCHECKED"}); v != 0 {
		t.Fatalf("firn_not_serving{cause=CLOCK_UNCHECKED} %v, want 0", v)
	}
	if _, page := httpGet(t, n.httpc, n.base+"/"); !strings.Contains(page, "Clock check: unchecked, accepted by --unchecked-clock-ok") {
		t.Fatalf("the status page does not say the unchecked clock is accepted:\n%s", page)
	}
	if !strings.Contains(n.logs.String(), "CLOCK UNCHECKED: serving on it, accepted by --unchecked-clock-ok") {
		t.Fatalf("the logs do not warn of the unchecked clock:\n%s", n.logs.String())
	}
}

// The node's own embedded coordinator (core.Config.PrivateCoordinator,
// set by `firn serve` when it started the embedded etcd) serves on an
// unchecked clock without the flag, as before.
func TestUncheckedClockPrivateCoordinator(t *testing.T) {
	e := etcdtest.StartEmbedded(t)
	n := startNode(t, e.Endpoints, t.TempDir(), checkedClock, func(c *core.Config) { c.PrivateCoordinator = true })
	waitServing(t, n.ids, "", 10*time.Second)
	resp, err := n.ids.Info(ctx(t), &firnv1.InfoRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if !resp.GetClockUnchecked() || !strings.HasPrefix(resp.GetClockCheck(), "unchecked, accepted on this node's own embedded coordinator") {
		t.Fatalf("Info: clock unchecked %v, check %q", resp.GetClockUnchecked(), resp.GetClockCheck())
	}
}

// Three nodes without NTP check each other's clocks and serve; down to
// two, nothing checks them and both stop; a third back, they serve again.
func TestUncheckedClockThreeTwoThree(t *testing.T) {
	e := etcdtest.StartEmbedded(t)
	a := startNamedNode(t, "a", e.Endpoints, t.TempDir(), checkedClock)
	b := startNamedNode(t, "b", e.Endpoints, t.TempDir(), checkedClock)
	cdir := t.TempDir()
	c := startNamedNode(t, "c", e.Endpoints, cdir, checkedClock)
	for _, x := range []*tnode{a, b, c} {
		waitServing(t, x.ids, "", 15*time.Second)
	}
	resp, err := a.ids.Info(ctx(t), &firnv1.InfoRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if resp.GetClockUnchecked() || resp.GetClockCheck() != "peers (3 live nodes)" {
		t.Fatalf("three nodes: clock unchecked %v, check %q", resp.GetClockUnchecked(), resp.GetClockCheck())
	}

	c.stop() // graceful: its lease is released at once
	for _, x := range []*tnode{a, b} {
		waitNotServing(t, x.ids, "", 5*time.Second)
		if g := x.genInfo(t, ""); g.GetCause() != "CLOCK_UNCHECKED" {
			t.Fatalf("down to two: cause %q (%s), want CLOCK_UNCHECKED", g.GetCause(), g.GetReason())
		}
		_, err := x.ids.NextID(ctx(t), &firnv1.NextIDRequest{})
		wantCode(t, "NextID with two nodes", err, codes.Unavailable, "2 live nodes", "--unchecked-clock-ok")
		wantInfo(t, "NextID with two nodes", err, "CLOCK_UNCHECKED", map[string]string{"measured_nodes": "2"})
		if v := value(t, scrape(t, x.httpc, x.base), "firn_clock_unchecked", nil); v != 1 {
			t.Fatalf("firn_clock_unchecked %v with two nodes, want 1", v)
		}
	}

	c = startNamedNode(t, "c", e.Endpoints, cdir, checkedClock)
	for _, x := range []*tnode{a, b, c} {
		waitServing(t, x.ids, "", 15*time.Second)
		if _, err := x.ids.NextIDs(ctx(t), &firnv1.NextIDsRequest{Count: 100}); err != nil {
			t.Fatalf("NextIDs with three nodes again: %v", err)
		}
	}
	if v := value(t, scrape(t, a.httpc, a.base), "firn_clock_unchecked", nil); v != 0 {
		t.Fatalf("firn_clock_unchecked %v with three nodes, want 0", v)
	}
}
