package clientnode

import (
	"sync"
	"testing"
	"time"

	"github.com/firnid/firn/client"
)

// TestSegmentGeneratorClient: the Go client draws a segment generator's
// dense IDs from two real nodes as it draws snowflake IDs (prefetched runs,
// failover): four callers, every ID once, each caller's IDs increasing
// while it stays on one node, all at or above the definition's start; with
// the node the client used killed mid-stream, it goes on from the other.
func TestSegmentGeneratorClient(t *testing.T) {
	bin := buildFirn(t)
	gens := []string{"--generator", "default=snowflake", "--generator", "orders=segment,start=500"}
	a := startNode(t, bin, append([]string{"--embedded-client-addr", "127.0.0.1:" + freePort(t),
		"--embedded-peer-addr", "127.0.0.1:" + freePort(t)}, gens...)...)
	_, _, etcdURL := a.slot(t)
	b := startNode(t, bin, append([]string{"--etcd", etcdURL}, gens...)...)
	waitFor(t, 30*time.Second, "the segment generator of both nodes to serve", func() bool {
		for _, n := range []*node{a, b} {
			ok := false
			for _, g := range n.info(t).GetGenerators() {
				ok = ok || (g.GetName() == "orders" && g.GetServing() && g.GetKind() == "segment")
			}
			if !ok {
				return false
			}
		}
		return true
	})

	c := newClient(t, []string{b.addr, a.addr}, client.WithGenerator("orders"), client.WithCallTimeout(2*time.Second))
	ctx := ctxFor(t, 60*time.Second)
	var mu sync.Mutex
	var all []uint64
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	draw := func(n int) {
		for range 4 {
			wg.Go(func() {
				for range n {
					id, err := c.Next(ctx)
					if err != nil {
						errs <- err
						return
					}
					mu.Lock()
					all = append(all, id)
					mu.Unlock()
				}
			})
		}
		wg.Wait()
	}
	draw(5000)
	b.cmd.Process.Kill() // the node listed first, which the client used
	<-b.done
	draw(5000)
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	checkDistinct(t, all)
	for _, id := range all {
		if id < 500 {
			t.Fatalf("ID %d below the definition's start 500", id)
		}
	}
	if len(all) != 40000 {
		t.Fatalf("%d IDs, want 40000", len(all))
	}
}
