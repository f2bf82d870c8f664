package cluster

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	firnv1 "github.com/firnid/firn/client/firnv1"
)

// startScenarios: nodes starting — behind their own last reservation, and
// many at once competing for worker IDs.
var startScenarios = []scenario{
	{name: "restart 10s behind its reservation", beside: true, run: func(e *env) {
		n := e.newNode("n1")
		e.startAll(n)
		load := StartLoad(e.rec, e.nodes, LoadOptions{Callers: 2})
		time.Sleep(1500 * time.Millisecond)
		load.Stop()
		n.Kill()
		n.Start("--fault-clock-offset", "-10s")
		// Its floor (the last reservation it acknowledged, from its data
		// dir and the coordinator) lies 10 s ahead of its clock, beyond
		// max-lead: it waits for the clock, not ready, and says so — for
		// as long as it is behind.
		var body string
		for end := time.Now().Add(3 * time.Second); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
			var code int
			if code, body = n.Ready(); code == 200 {
				e.t.Fatalf("ready 10s behind its last reservation: %s", body)
			}
		}
		if !strings.Contains(body, "for the clock to reach") || !strings.Contains(body, "last reservation") {
			e.t.Errorf("10s behind, /readyz does not name the wait for its last reservation: %s", body)
		}
		behind := fault{node: "n1", from: time.Now(), causes: restarting}
		load = StartLoad(e.rec, e.nodes, LoadOptions{Callers: 1, Deadline: 2 * time.Second})
		n.SetOffset(0)
		if _, err := n.WaitReady(10 * time.Second); err != nil {
			e.t.Fatal(err)
		}
		behind = behind.until(time.Now())
		e.settle(500 * time.Millisecond)
		load.Stop()
		countFailures(e, e.rec.Failures(), within(behind))
		// No ID is issued while the clock is behind (the node is not
		// ready then): no skew to allow for.
		e.check(Bounds{})
	}},
	{name: "ten nodes started at once get distinct worker IDs", beside: true, run: func(e *env) {
		var ns []*Node
		for i := 0; i < 10; i++ {
			ns = append(ns, e.newNode(fmt.Sprintf("n%d", i)))
		}
		var wg sync.WaitGroup
		for _, n := range ns {
			n := n
			wg.Add(1)
			go func() { defer wg.Done(); n.Start() }()
		}
		wg.Wait()
		seen := map[string]string{}
		for _, n := range ns {
			if _, err := n.WaitReady(30 * time.Second); err != nil {
				e.t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			info, err := n.ID.Info(ctx, &firnv1.InfoRequest{})
			cancel()
			if err != nil {
				e.t.Fatal(err)
			}
			g := info.GetGenerators()[0]
			k := fmt.Sprintf("dc=%d worker=%d", g.GetDatacenter(), g.GetWorker())
			if other, dup := seen[k]; dup {
				e.t.Errorf("%s and %s both hold %s", other, n.Name, k)
			}
			seen[k] = n.Name
		}
		load := StartLoad(e.rec, ns, LoadOptions{Callers: 1, Pause: 5 * time.Millisecond})
		time.Sleep(time.Second)
		load.Stop()
		countFailures(e, e.rec.Failures(), none)
		e.check(Bounds{})
	}},
}
