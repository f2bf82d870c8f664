package cluster

import (
	"strings"
	"time"

	"google.golang.org/grpc/codes"
)

// Forward steps that nobody confirms (README, Clock policy): the node is
// not ready while stepped, refuses at once, issues no ID stamped with the
// step, and serves real time again within seconds of the correction.

func init() {
	scenarios = append(scenarios,
		scenario{name: "clock +1h held by NTP, then corrected", run: func(e *env) {
			_, ntp := ntpTrio(e.t)
			n := e.newNode("n1", "--ntp", ntp, "--ntp-interval", "1s")
			e.startAll(n)
			load := StartLoad(e.rec, e.nodes, LoadOptions{Callers: 3, Batch: 1000, Deadline: time.Second})
			time.Sleep(time.Second)
			stepAt := time.Now()
			n.SetOffset(time.Hour)
			d, body, err := n.WaitNotReady(3 * time.Second)
			if err != nil {
				e.t.Fatal(err)
			}
			e.row.FailClosed = d.Round(time.Millisecond).String()
			if !strings.Contains(body, "NTP offset") && !strings.Contains(body, "stepped forward") {
				e.t.Errorf("reason does not name the step or the NTP offset: %s", body)
			}
			time.Sleep(3 * time.Second)
			n.SetOffset(0)
			r, err := n.WaitReady(5 * time.Second)
			if err != nil {
				e.t.Fatal(err)
			}
			readyAt := time.Now()
			e.row.Recover = r.Round(time.Millisecond).String()
			time.Sleep(3 * time.Second)
			load.Stop()
			// Refused at once while stepped; after the correction nothing
			// fails, and nothing ever runs to its deadline.
			countFailures(e, e.rec.Failures(), func(f Failure) bool {
				return f.Code == codes.Unavailable && f.At.After(stepAt) && f.At.Before(readyAt)
			})
			e.check(Bounds{})
		}},
		scenario{name: "clock +1h on one node of three, then corrected", run: func(e *env) {
			n1, n2, n3 := e.newNode("n1"), e.newNode("n2"), e.newNode("n3")
			e.startAll(n1, n2, n3)
			time.Sleep(2 * time.Second) // every node has seen the others' heartbeats
			load := StartLoad(e.rec, e.nodes, LoadOptions{Callers: 2, Batch: 1000, Deadline: time.Second})
			time.Sleep(500 * time.Millisecond)
			stepAt := time.Now()
			n1.SetOffset(time.Hour)
			d, body, err := n1.WaitNotReady(2 * time.Second)
			if err != nil {
				e.t.Fatal(err)
			}
			e.row.FailClosed = d.Round(time.Millisecond).String()
			if !strings.Contains(body, "stepped forward") && !strings.Contains(body, "peer median") {
				e.t.Errorf("reason does not name the step: %s", body)
			}
			// Held for good while stepped (not cleared by the first peer
			// reading nor by heartbeats from before the step).
			for start := time.Now(); time.Since(start) < 3*time.Second; time.Sleep(50 * time.Millisecond) {
				if code, _ := n1.Ready(); code == 200 {
					e.t.Fatalf("the stepped node is ready %v after its +1h step", time.Since(stepAt).Round(time.Millisecond))
				}
			}
			n1.SetOffset(0)
			r, err := n1.WaitReady(5 * time.Second)
			if err != nil {
				e.t.Fatal(err)
			}
			readyAt := time.Now()
			e.row.Recover = r.Round(time.Millisecond).String()
			time.Sleep(2 * time.Second)
			load.Stop()
			countFailures(e, e.rec.Failures(), func(f Failure) bool {
				return f.Node == n1.Name && f.Code == codes.Unavailable && f.At.After(stepAt) && f.At.Before(readyAt)
			})
			// No skew allowance: no ID may carry the stepped time.
			e.check(Bounds{})
		}},
	)
}
