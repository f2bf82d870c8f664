package sections

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/firnid/firn/clockguard"
	"github.com/firnid/firn/coordinator"
	"github.com/firnid/firn/coordinator/etcd"
	"github.com/firnid/firn/internal/testing/etcdtest"
	"github.com/firnid/firn/segment"
	"github.com/firnid/firn/seq"
)

// TestManySectionsServeOnEtcd: one node, a fresh generator of the most
// sections allowed on a real etcd, where each acquisition scans the
// generator's slot space (S acquisitions cost about S² reads). Each round
// acquires what it can within its time and writes it, so the node makes
// progress every round: no take's write fails, the sections it holds
// never fall back, and it holds more within every round's bound (its
// reads, its acquisitions and its write, each bounded by Timeout). It
// serves every section before a generous deadline (8 s here, 30 s under
// the race detector on two cores). With the round's one context shared
// by the acquisitions and the take's write, the write failed at once and
// every section acquired was given up, round after round: it never
// served.
func TestManySectionsServeOnEtcd(t *testing.T) {
	const (
		S       = segment.MaxSections
		timeout = time.Second
		// round bounds one round: its reads (2 × Timeout), its
		// acquisitions (Timeout, the last one begun within it taking
		// up to Timeout more), its write (2 × Timeout) and the wait.
		round    = 6*timeout + DefaultPollEvery
		deadline = 90 * time.Second
	)
	p := etcdtest.StartCluster(t, 1)
	cfg := etcd.DefaultConfig()
	cfg.Endpoints, cfg.Clock, cfg.Cluster, cfg.Logger = p.Endpoints(), clockguard.NewSystem(), "many", quiet
	c, err := etcd.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var (
		mu       sync.Mutex
		failures []string // coordinator operations of the takes that failed
		writes   int      // take writes acknowledged (no calls: no raises)
	)
	m, err := New(Config{
		Generator: "chats", Def: seq.Definition{Sections: S}, Coord: c, Workers: c.Workers, Counters: c,
		Node:  coordinator.NodeInfo{Name: "a", InstanceID: "inst-a", Address: "a:7300"},
		Clock: clockguard.NewSystem(), Timeout: timeout, Settle: DefaultSettle, Mark: c.MarkRestored, Log: quiet,
		Observe: func(op string, took time.Duration, err error) {
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err != nil && !errors.Is(err, coordinator.ErrExhausted):
				failures = append(failures, op+" after "+took.Round(time.Millisecond).String()+": "+err.Error())
			case err == nil && op == "raise":
				writes++
			}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Stop(context.Background(), true)
	began := time.Now()
	var last Stats
	rose := began // when the sections held last rose
	for ; ; time.Sleep(100 * time.Millisecond) {
		st := m.Stats()
		at := time.Since(began).Seconds()
		mu.Lock()
		f, w := failures, writes
		mu.Unlock()
		if len(f) > 0 {
			t.Fatalf("%.1fs: %+v; a take's coordinator operation failed (%d): %s", at, st, len(f), f[0])
		}
		switch {
		case st.Owned < last.Owned:
			t.Fatalf("%.1fs: sections held fell from %d to %d: %+v", at, last.Owned, st.Owned, st)
		case st.Owned > last.Owned:
			t.Logf("%5.1fs: %+v", at, st)
			rose = time.Now()
		case st.Owned < S && time.Since(rose) > round:
			t.Fatalf("%.1fs: %+v; no section taken for %v, longer than a round may last (%v)", at, st, time.Since(rose).Round(time.Millisecond), round)
		}
		last = st
		if st.Serving == S {
			t.Logf("all %d sections serving after %v, in %d takes", S, time.Since(began).Round(time.Millisecond), w)
			return
		}
		if time.Since(began) > deadline {
			t.Fatalf("after %v: %+v, %d takes: not every section serving", deadline, st, w)
		}
	}
}
