package load

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

const exposition = `# HELP firn_segment_claims_total Counter writes that claimed IDs.
# TYPE firn_segment_claims_total counter
firn_segment_claims_total{generator="orders"} 2709
firn_segment_claims_total{generator="orders2"} 7
# TYPE firn_segment_claimed_ids_total counter
firn_segment_claimed_ids_total{generator="orders"} 2.5551e+10
firn_segment_step{generator="orders"} 1e+07
firn_workers_serving{generator="default"} 1
`

func TestParseSegmentMetrics(t *testing.T) {
	m, found, err := parseSegmentMetrics(strings.NewReader(exposition), "orders")
	if err != nil || !found || m.claims != 2709 || m.claimed != 2.5551e10 || m.step != 1e7 {
		t.Fatalf("orders: %+v found %v err %v", m, found, err)
	}
	if _, found, err := parseSegmentMetrics(strings.NewReader(exposition), "default"); found || err != nil {
		t.Fatalf("default (a snowflake generator): found %v err %v", found, err)
	}
	cw := m.since(segmentMetrics{claims: 2700, claimed: 2.5461e10}, "orders", 2)
	if cw.Claims != 9 || cw.PerSecond != 4.5 || cw.ClaimedIDs != 90_000_000 || cw.Step != 10_000_000 {
		t.Fatalf("since: %+v", cw)
	}
}

func TestReadSegmentMetrics(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte(exposition)) }))
	t.Cleanup(srv.Close)
	if m, err := readSegmentMetrics(context.Background(), srv.URL, "orders2"); err != nil || m.claims != 7 {
		t.Fatalf("orders2: %+v %v", m, err)
	}
	if _, err := readSegmentMetrics(context.Background(), srv.URL, "default"); err == nil || !strings.Contains(err.Error(), "not a segment generator") {
		t.Fatalf("default: %v", err)
	}
}

// --noop-heap auto reads the node's heap goal and GOGC: the live heap is
// the goal less GOGC's growth, and the no-op runs at the node's GOGC.
func TestReadLiveHeap(t *testing.T) {
	for _, c := range []struct {
		page      string
		live      int64
		gogc      int
		errPrefix string
	}{
		{page: "go_gc_gogc_percent 500\ngo_memstats_next_gc_bytes 1.2e+07\n", live: 2_000_000, gogc: 500},
		{page: "go_memstats_next_gc_bytes 8e+06\n", live: 4_000_000, gogc: 100},
		{page: "go_gc_gogc_percent 100\n", errPrefix: "--node-metrics"},
	} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte(c.page)) }))
		live, gogc, err := readLiveHeap(context.Background(), srv.URL)
		srv.Close()
		if c.errPrefix != "" {
			if err == nil || !strings.HasPrefix(err.Error(), c.errPrefix) {
				t.Errorf("%q: %d, %d, %v; want an error naming %s", c.page, live, gogc, err, c.errPrefix)
			}
			continue
		}
		if err != nil || live != c.live || gogc != c.gogc {
			t.Errorf("%q: live %d GOGC %d (%v), want %d and %d", c.page, live, gogc, err, c.live, c.gogc)
		}
	}
}
