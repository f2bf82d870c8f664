package server_test

import (
	"encoding/json"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	firnv1 "github.com/firnid/firn/client/firnv1"
	"github.com/firnid/firn/internal/testing/etcdtest"
	"github.com/firnid/firn/server/core"
)

// caller is one client that records every ID it received, in order.
type caller struct {
	t    *testing.T
	n    *tnode
	gen  string
	seen []uint64
}

func (c *caller) one() {
	c.t.Helper()
	resp, err := c.n.ids.NextID(ctx(c.t), &firnv1.NextIDRequest{Generator: c.gen})
	if err != nil {
		c.t.Fatalf("NextID after %d IDs: %v", len(c.seen), err)
	}
	c.seen = append(c.seen, resp.GetId())
}

func (c *caller) batch(k int) {
	c.t.Helper()
	resp, err := c.n.ids.NextIDs(ctx(c.t), &firnv1.NextIDsRequest{Generator: c.gen, Count: uint32(k)})
	if err != nil {
		c.t.Fatalf("NextIDs(%d) after %d IDs: %v", k, len(c.seen), err)
	}
	if len(resp.GetIds()) != k {
		c.t.Fatalf("NextIDs(%d) returned %d IDs", k, len(resp.GetIds()))
	}
	c.seen = append(c.seen, resp.GetIds()...)
}

func (c *caller) http(k int) {
	c.t.Helper()
	code, body := httpGet(c.t, c.n.httpc, fmt.Sprintf("%s/v1/ids?generator=%s&count=%d", c.n.base, c.gen, k))
	if code != 200 {
		c.t.Fatalf("GET /v1/ids count=%d: %d %s", k, code, body)
	}
	c.seen = append(c.seen, parseIDs(c.t, body, k)...)
}

func parseIDs(t *testing.T, body string, want int) []uint64 {
	t.Helper()
	var out struct {
		IDs []string `json:"ids"`
	}
	if err := json.Unmarshal([]byte(body), &out); err != nil {
		t.Fatalf("GET /v1/ids: %v in %q", err, body)
	}
	if len(out.IDs) != want {
		t.Fatalf("GET /v1/ids: %d IDs, want %d", len(out.IDs), want)
	}
	ids := make([]uint64, len(out.IDs))
	for i, s := range out.IDs {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("GET /v1/ids: ID %q is not a decimal uint64", s)
		}
		ids[i] = v
	}
	return ids
}

// ringAvailable reads firn_ringbuffer_available and _capacity.
func ringAvailable(t *testing.T, n *tnode) (avail, capacity float64) {
	fams := scrape(t, n.httpc, n.base)
	l := map[string]string{"generator": "default"}
	return value(t, fams, "firn_ringbuffer_available", l), value(t, fams, "firn_ringbuffer_capacity", l)
}

// A single caller's successive IDs strictly increase, unary and batch
// mixed (and HTTP among them), with the ring buffer empty, full, and a
// 100,000 batch overflowing it.
func TestSuccessiveIDsIncrease(t *testing.T) {
	e := etcdtest.StartEmbedded(t)
	// A small ring that a modest demand fills (the fill target is the
	// demand rate × max-staleness/2, at most the ring).
	n := startNode(t, e.Endpoints, t.TempDir(), func(c *core.Config) { c.RingSize, c.MaxStaleness = 128, 2*time.Second })
	waitServing(t, n.ids, "", 10*time.Second)
	c := &caller{t: t, n: n}

	// Empty: no demand yet, so nothing is buffered.
	if avail, _ := ringAvailable(t, n); avail != 0 {
		t.Fatalf("ring holds %v IDs before any demand; the empty case needs 0", avail)
	}
	c.one()
	c.batch(3)
	c.one()
	c.http(2)
	c.batch(500) // more than the ring holds
	c.one()
	fams := scrape(t, n.httpc, n.base)
	if hits := value(t, fams, "firn_ringbuffer_empty_hits_total", map[string]string{"generator": "default"}); hits < 1 {
		t.Fatalf("firn_ringbuffer_empty_hits_total = %v after calls on an empty ring", hits)
	}

	// Full: keep a demand until the filler filled the whole ring.
	full := false
	for start := time.Now(); time.Since(start) < 10*time.Second; {
		c.batch(80)
		time.Sleep(20 * time.Millisecond)
		if avail, capacity := ringAvailable(t, n); avail == capacity {
			full = true
			break
		}
	}
	if !full {
		t.Fatal("the ring never filled under demand within 10s")
	}
	c.one()
	c.batch(5)
	c.http(3)
	c.batch(128) // the whole ring and a little more
	c.one()

	// Overflow: a 100,000 batch is far beyond the ring.
	c.batch(100_000)
	c.one()
	c.batch(7)
	c.http(1)
	c.one()

	increasing(t, "single caller", c.seen)
	if len(c.seen) < 100_000+650 {
		t.Fatalf("only %d IDs recorded", len(c.seen))
	}
}

// Concurrent callers: each one's IDs strictly increase, and no ID reaches
// two callers.
func TestConcurrentCallersIncreaseAndDiffer(t *testing.T) {
	e := etcdtest.StartEmbedded(t)
	n := startNode(t, e.Endpoints, t.TempDir(), func(c *core.Config) { c.RingSize = 1024 })
	waitServing(t, n.ids, "", 10*time.Second)
	const callers = 4
	var wg sync.WaitGroup
	seqs := make([][]uint64, callers)
	errs := make(chan error, callers)
	for i := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var seen []uint64
			for j := range 300 {
				if j%3 == 0 {
					resp, err := n.ids.NextIDs(ctx(t), &firnv1.NextIDsRequest{Count: uint32(1 + j%700)})
					if err != nil {
						errs <- err
						return
					}
					seen = append(seen, resp.GetIds()...)
					continue
				}
				resp, err := n.ids.NextID(ctx(t), &firnv1.NextIDRequest{})
				if err != nil {
					errs <- err
					return
				}
				seen = append(seen, resp.GetId())
			}
			seqs[i] = seen
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("call failed: %v", err)
	}
	all := map[uint64]int{}
	for i, s := range seqs {
		increasing(t, fmt.Sprintf("caller %d", i), s)
		for _, id := range s {
			if other, dup := all[id]; dup {
				t.Fatalf("ID %d reached callers %d and %d", id, other, i)
			}
			all[id] = i
		}
	}
}
