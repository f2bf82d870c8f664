package server_test

import (
	"fmt"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	firnv1 "github.com/firnid/firn/client/firnv1"
	"github.com/firnid/firn/clockguard"
	"github.com/firnid/firn/internal/testing/etcdtest"
	"github.com/firnid/firn/server/core"
)

// /metrics exposes the firn_* series of the node, with values that match
// the node's state, and firn_ids_issued_total counts every ID handed out.
func TestMetrics(t *testing.T) {
	e := etcdtest.StartEmbedded(t)
	n := startNode(t, e.Endpoints, t.TempDir(), faultInjection,
		func(c *core.Config) { c.Cluster, c.RingSize = "metrics", 256 })
	waitServing(t, n.ids, "", 10*time.Second)
	g := map[string]string{"generator": "default"}

	before := scrape(t, n.httpc, n.base)
	issued0 := value(t, before, "firn_ids_issued_total", g)
	if _, err := n.ids.NextID(ctx(t), &firnv1.NextIDRequest{}); err != nil {
		t.Fatal(err)
	}
	if _, err := n.ids.NextIDs(ctx(t), &firnv1.NextIDsRequest{Count: 250}); err != nil {
		t.Fatal(err)
	}
	if code, body := httpGet(t, n.httpc, n.base+"/v1/ids?count=9"); code != 200 {
		t.Fatalf("/v1/ids: %d %s", code, body)
	}
	// Wait for a reservation round after the first, and for the peer watch
	// (about once a second) to count the live owners; the checks below
	// say what is missing after 5 s.
	fams := scrape(t, n.httpc, n.base)
	ready := func() bool {
		m, ok := sample(fams, "firn_coordinator_operation_duration_seconds", map[string]string{"op": "reserve"})
		return ok && m.GetHistogram().GetSampleCount() >= 2 && value(t, fams, "firn_worker_ids_in_use", g) >= 1
	}
	for start := time.Now(); !ready() && time.Since(start) < 5*time.Second; {
		time.Sleep(100 * time.Millisecond)
		fams = scrape(t, n.httpc, n.base)
	}
	if d := value(t, fams, "firn_ids_issued_total", g) - issued0; d != 260 {
		t.Fatalf("firn_ids_issued_total grew by %v for 260 IDs", d)
	}

	info := n.genInfo(t, "")
	checks := []struct {
		name   string
		labels map[string]string
		ok     func(v float64) bool
		want   string
	}{
		{"firn_serving", g, func(v float64) bool { return v == 1 }, "1"},
		{"firn_state", map[string]string{"generator": "default", "state": "serving"}, func(v float64) bool { return v == 1 }, "1"},
		{"firn_ringbuffer_capacity", g, func(v float64) bool { return v == 256 }, "256"},
		{"firn_ringbuffer_available", g, func(v float64) bool { return v >= 0 && v <= 256 }, "0..256"},
		{"firn_ringbuffer_empty_hits_total", g, func(v float64) bool { return v >= 1 }, ">= 1 (the first call found it empty)"},
		{"firn_ringbuffer_stale_dropped_total", g, func(v float64) bool { return v >= 0 }, ">= 0"},
		{"firn_worker_id", g, func(v float64) bool { return v == float64(info.GetWorker()) }, "Info's worker"},
		{"firn_worker_ids_in_use", g, func(v float64) bool { return v >= 1 }, ">= 1 (this node holds one)"},
		{"firn_worker_id_limit", g, func(v float64) bool { return v == 1024 }, "1024 (snowflake: 5+5 bits)"},
		{"firn_reservation_remaining_seconds", g, func(v float64) bool { return v > 2 && v <= 6.5 }, "about the 5s window"},
		{"firn_clock_lead_seconds", g, func(v float64) bool { return v >= 0 && v <= 1 }, "0..max-lead"},
		{"firn_max_lead_seconds", g, func(v float64) bool { return v == 1 }, "1"},
		{"firn_layout_seconds_remaining", g, func(v float64) bool { return v > 10*365*86400 }, "more than 10 years"},
		{"firn_max_clock_offset_seconds", nil, func(v float64) bool { return v == 0.25 }, "0.25"},
		{"firn_ntp_offset_seconds", nil, func(v float64) bool { return v == 0 }, "0 (no NTP)"},
		{"firn_ntp_unchecked", nil, func(v float64) bool { return v == 1 }, "1 (no NTP)"},
		{"firn_ntp_check_failures_total", nil, func(v float64) bool { return v == 0 }, "0"},
		{"firn_clock_steps_total", map[string]string{"direction": "backward"}, func(v float64) bool { return v == 0 }, "0"},
		{"firn_coordinator_errors_total", map[string]string{"op": "reserve"}, func(v float64) bool { return v == 0 }, "0"},
		{"firn_fault_injection_enabled", nil, func(v float64) bool { return v == 1 }, "1"},
		{"firn_fault_clock_offset_seconds", nil, func(v float64) bool { return v == 0 }, "0"},
		{"firn_build_info", map[string]string{"cluster": "metrics", "node": n.node.NodeInfo().Name, "version": "dev",
			"revision": "", "modified": "false", "go_version": runtime.Version()},
			func(v float64) bool { return v == 1 }, "1"},
		{"grpc_server_handled_total", map[string]string{"grpc_method": "NextIDs", "grpc_code": "OK"}, func(v float64) bool { return v >= 1 }, ">= 1"},
		{"grpc_server_handled_total", map[string]string{"grpc_method": "NextID", "grpc_code": "OK"}, func(v float64) bool { return v >= 1 }, ">= 1"},
	}
	for _, c := range checks {
		if v := value(t, fams, c.name, c.labels); !c.ok(v) {
			t.Errorf("%s%v = %v, want %s", c.name, c.labels, v, c.want)
		}
	}
	// No step yet but what the machine made: a VM its host pauses has
	// the paused time added to its wall clock and not to its monotonic
	// one — a real forward step, of a millisecond or so, which the node
	// counts (a fresh-clone run saw three). The last step is then that
	// one; with none, 0.
	fwd := value(t, fams, "firn_clock_steps_total", map[string]string{"direction": "forward"})
	last := value(t, fams, "firn_clock_last_step_seconds", nil)
	if (fwd == 0 && last != 0) || (fwd > 0 && (last >= 0 || last < -1)) {
		t.Errorf("firn_clock_last_step_seconds %v with %v forward steps, want 0 with none and a forward step (−1..0 s) with some", last, fwd)
	}
	for _, op := range []string{"acquire", "reserve"} {
		m, ok := sample(fams, "firn_coordinator_operation_duration_seconds", map[string]string{"op": op})
		if !ok || m.GetHistogram().GetSampleCount() < 1 {
			t.Errorf("firn_coordinator_operation_duration_seconds{op=%q}: no observation (%v)", op, m)
		}
	}
	if f := fams["grpc_server_handling_seconds"]; f == nil || f.GetType() != dto.MetricType_HISTOGRAM {
		t.Errorf("no grpc_server_handling_seconds histogram")
	}
	// Every cause exported while serving, all 0: a rule's for: does not
	// restart, and a dashboard has series before the first failure.
	for _, code := range clockguard.Codes {
		if v := value(t, fams, "firn_not_serving", map[string]string{"generator": "default", "cause": string(code)}); v != 0 {
			t.Errorf("firn_not_serving{cause=%s} = %v while serving", code, v)
		}
	}
	if n := len(fams["firn_not_serving"].GetMetric()); n != len(clockguard.Codes) {
		t.Errorf("%d firn_not_serving series, want one per cause (%d)", n, len(clockguard.Codes))
	}

	// Not serving: the reason series and the step gauges.
	n.setOffset(t, -5*time.Second)
	waitNotServing(t, n.ids, "", 3*time.Second)
	fams = scrape(t, n.httpc, n.base)
	if v := value(t, fams, "firn_serving", g); v != 0 {
		t.Errorf("firn_serving %v while not serving", v)
	}
	if v := value(t, fams, "firn_state", map[string]string{"generator": "default", "state": "not-serving"}); v != 1 {
		t.Errorf("firn_state{state=not-serving} %v while not serving", v)
	}
	for _, code := range clockguard.Codes {
		want := b2f(code == clockguard.CodeClockRollback)
		if v := value(t, fams, "firn_not_serving", map[string]string{"generator": "default", "cause": string(code)}); v != want {
			t.Errorf("firn_not_serving{cause=%s} = %v after a rollback, want %v", code, v, want)
		}
	}
	if v := value(t, fams, "firn_clock_steps_total", map[string]string{"direction": "backward"}); v < 1 {
		t.Errorf("firn_clock_steps_total{backward} %v after a −5s step", v)
	}
	if v := value(t, fams, "firn_clock_last_step_seconds", nil); v > -4.9 || v < -5.1 {
		t.Errorf("firn_clock_last_step_seconds %v after a −5s step", v)
	}
	if v := value(t, fams, "firn_fault_clock_offset_seconds", nil); v != -5 {
		t.Errorf("firn_fault_clock_offset_seconds %v", v)
	}
	n.setOffset(t, 0)
	waitServing(t, n.ids, "", 5*time.Second)
	if v := value(t, scrape(t, n.httpc, n.base), "firn_not_serving", map[string]string{"generator": "default", "cause": "CLOCK_ROLLBACK"}); v != 0 {
		t.Errorf("firn_not_serving{cause=CLOCK_ROLLBACK} = %v after recovery", v)
	}
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// The status page draws the last two minutes of each generator's rate and
// lead as inline SVG, one point per second, with max-lead dashed.
func TestStatusPageCharts(t *testing.T) {
	e := etcdtest.StartEmbedded(t)
	n := startNode(t, e.Endpoints, t.TempDir())
	waitServing(t, n.ids, "", 10*time.Second)
	for start := time.Now(); time.Since(start) < 3500*time.Millisecond; time.Sleep(50 * time.Millisecond) {
		if _, err := n.ids.NextIDs(ctx(t), &firnv1.NextIDsRequest{Count: 1000}); err != nil {
			t.Fatal(err)
		}
	}
	code, page := httpGet(t, n.httpc, n.base+"/")
	if code != 200 {
		t.Fatalf("status page %d", code)
	}
	pts := regexp.MustCompile(`<svg class="spark" id="rate-default"[^>]*>.*?<polyline[^>]*points="([^"]*)"`).FindStringSubmatch(page)
	if pts == nil {
		t.Fatalf("no rate chart on the status page:\n%s", page)
	}
	points := strings.Fields(pts[1])
	if len(points) < 2 {
		t.Fatalf("rate chart with %d points after 3.5 s", len(points))
	}
	// Some second carried IDs: a point above the baseline (y < 34).
	above := false
	for _, p := range points {
		var x, y float64
		fmt.Sscanf(p, "%f,%f", &x, &y)
		above = above || y < 33
	}
	if !above {
		t.Errorf("rate chart flat under load: %v", points)
	}
	if !regexp.MustCompile(`<svg class="spark" id="lead-default"[^>]*>.*?stroke-dasharray`).MatchString(page) {
		t.Errorf("lead chart without its max-lead line")
	}
	if strings.Contains(page, "<script") {
		t.Errorf("the status page carries a script")
	}
}
