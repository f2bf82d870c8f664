package cluster

import (
	"time"
)

// zombieScenarios: a node frozen while a replacement on its data dir takes
// its worker back, then thawed beside it — the case the coordinator's
// fences exist for. test/run.sh also runs it against a node built with the
// fences weakened (FIRN_CHAOS_TAGS=firn_weakfence), where the checker must
// go red.
var zombieScenarios = []scenario{
	{name: "zombie: frozen, its worker taken back by a replacement on its data dir, thawed", beside: true, both: true, run: func(e *env) {
		n1 := e.newNode("n1")
		e.startAll(n1)
		load := StartLoad(e.rec, []*Node{n1}, LoadOptions{Callers: 2, Deadline: 2 * time.Second})
		time.Sleep(time.Second)
		frozen := time.Now()
		n1.Freeze()
		// The replacement: the same data dir (the same instance), so once
		// n1's owner record is older than the take-back age it takes the
		// worker back, while n1's lease still stands; n1 is thawed as it
		// does, a zombie beside it.
		time.Sleep(2500 * time.Millisecond)
		rep := e.newNode("n1r")
		rep.Start("--data-dir", n1.DataDir) // the last --data-dir given wins
		time.Sleep(time.Second)
		n1.Thaw()
		thawed := time.Now()
		// Ready once it holds a worker — n1's, taken back, or another
		// after n1's lease ran out (the thawed zombie keeps its record
		// fresh until its write fails) — and waited the restore guard.
		if _, err := rep.WaitReady(guardWait + 30*time.Second); err != nil {
			e.t.Fatal(err)
		}
		repLoad := StartLoad(e.rec, []*Node{rep}, LoadOptions{Callers: 2, Deadline: 2 * time.Second})
		// The zombie's next reservation write must fail its fence; it
		// stops issuing on the worker it lost.
		time.Sleep(3 * time.Second)
		load.Stop()
		repLoad.Stop()
		// n1's callers time out while it is frozen; thawed, it is refused
		// for the lease it lost, until the end.
		countFailures(e, e.rec.Failures(), within(fault{node: "n1", from: frozen, cutOff: true, causes: leaseLost}))
		// IDs n1 answered as it froze arrive when it thaws.
		e.check(Bounds{Skew: thawed.Sub(frozen)})
	}},
}
