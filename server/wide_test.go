package server_test

import (
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/firnid/firn/client/firnv1"
	"github.com/firnid/firn/coordinator"
	"github.com/firnid/firn/generator"
	"github.com/firnid/firn/internal/testing/etcdtest"
	"github.com/firnid/firn/internal/testing/ntptest"
	"github.com/firnid/firn/server/core"
)

func workers(k int) func(*core.Config) { return func(c *core.Config) { c.Workers = k } }

// rangeIDs asks NextRange for k IDs and expands the runs, checking that
// they add up to k and increase.
func (c *caller) rangeIDs(k uint64) []generator.Run {
	c.t.Helper()
	resp, err := c.n.ids.NextRange(ctx(c.t), &firnv1.NextRangeRequest{Generator: c.gen, Count: k})
	if err != nil {
		c.t.Fatalf("NextRange(%d) after %d IDs: %v", k, len(c.seen), err)
	}
	var total uint64
	var runs []generator.Run
	for _, r := range resp.GetRuns() {
		if r.GetCount() == 0 {
			c.t.Fatalf("NextRange(%d): an empty run", k)
		}
		total += r.GetCount()
		for i := range r.GetCount() {
			c.seen = append(c.seen, r.GetFirst()+i)
		}
		runs = append(runs, generator.Run{First: r.GetFirst(), Count: r.GetCount()})
	}
	if total != k {
		c.t.Fatalf("NextRange(%d) returned %d IDs", k, total)
	}
	return runs
}

// A generator of four workers: it holds four leases, hands each unit's
// blocks out in ascending worker order (so every caller's IDs increase,
// whatever it asks with), and NextRange returns the same IDs as runs.
func TestWideGenerator(t *testing.T) {
	e := etcdtest.StartEmbedded(t)
	n := startNode(t, e.Endpoints, t.TempDir(), workers(4))
	waitServing(t, n.ids, "default", 10*time.Second)
	deadline := time.Now().Add(10 * time.Second)
	var info *firnv1.GeneratorInfo
	for info = n.genInfo(t, "default"); len(info.GetWorkers()) < 4 && time.Now().Before(deadline); info = n.genInfo(t, "default") {
		time.Sleep(50 * time.Millisecond)
	}
	ws := info.GetWorkers()
	if len(ws) != 4 || !slices.IsSorted(ws) || info.GetWorkersWanted() != 4 {
		t.Fatalf("Info: workers %v, wanted %d; want 4 ascending, 4", ws, info.GetWorkersWanted())
	}
	l, _ := generator.Preset("snowflake")
	if want := l.PerUnit() * uint64(time.Second/l.Unit) * 4; info.GetMaxRange() != want {
		t.Fatalf("max_range %d, want %d", info.GetMaxRange(), want)
	}

	c := &caller{t: t, n: n}
	c.one()
	c.batch(100)
	runs := c.rangeIDs(200_000) // ~12 units of four workers
	if len(runs) > 200_000/4096*4+8 {
		t.Fatalf("NextRange(200000): %d runs; want a run per worker's block at most", len(runs))
	}
	c.batch(5000)
	c.one()
	c.rangeIDs(1)
	increasing(t, "one caller's IDs across NextID, NextIDs and NextRange", c.seen)

	// Within each unit, the workers' blocks come in ascending order, and
	// only the workers held appear.
	lastWorker := map[int64]uint64{}
	for _, id := range c.seen {
		p, err := l.Decode(id)
		if err != nil {
			t.Fatal(err)
		}
		w := p.Datacenter<<l.WorkerBits | p.Worker
		if !slices.Contains(ws, uint32(w)) {
			t.Fatalf("ID %d of worker %d: not one the generator holds (%v)", id, w, ws)
		}
		if prev, ok := lastWorker[p.Units]; ok && w < prev {
			t.Fatalf("unit %d: worker %d after worker %d", p.Units, w, prev)
		}
		lastWorker[p.Units] = w
	}
	insp := inspector(t, e.Endpoints, n.cfg.Cluster)
	holders, err := insp.Workers(ctx(t), "default")
	if err != nil {
		t.Fatal(err)
	}
	live := 0
	for _, h := range holders {
		if h.Live {
			live++
		}
	}
	if live != 4 {
		t.Fatalf("%d live leases, want 4: %+v", live, holders)
	}

	// Out of range: the bound is named.
	if _, err := n.ids.NextRange(ctx(t), &firnv1.NextRangeRequest{Count: info.GetMaxRange() + 1}); err == nil {
		t.Fatal("NextRange above max_range accepted")
	}
}

// One worker's lease lost under load: the generator serves on from the
// others (no failed call, IDs still unique and increasing per caller),
// says which worker is out, and takes a worker again.
func TestWideLeaseLossLeavesOthersServing(t *testing.T) {
	e := etcdtest.StartEmbedded(t)
	n := startNode(t, e.Endpoints, t.TempDir(), workers(3), func(c *core.Config) {
		c.Timing.Timeout, c.Timing.ReservationWindow = 500*time.Millisecond, 2500*time.Millisecond
	})
	waitServing(t, n.ids, "default", 10*time.Second)
	deadline := time.Now().Add(10 * time.Second)
	for len(n.genInfo(t, "default").GetWorkers()) < 3 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	ws := n.genInfo(t, "default").GetWorkers()
	if len(ws) != 3 {
		t.Fatalf("workers %v, want 3", ws)
	}
	var mu sync.Mutex
	var all [][]uint64
	var errs []error
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var calls atomic.Int64 // answered, any outcome
	for range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var mine []uint64
			for {
				select {
				case <-stop:
					mu.Lock()
					all = append(all, mine)
					mu.Unlock()
					return
				default:
				}
				resp, err := n.ids.NextRange(ctx(t), &firnv1.NextRangeRequest{Count: 20_000})
				calls.Add(1)
				if err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
					continue
				}
				for _, r := range resp.GetRuns() {
					for i := range r.GetCount() {
						mine = append(mine, r.GetFirst()+i)
					}
				}
			}
		}()
	}
	awaitCalls(t, &calls, 3) // calls flowing before the loss
	l, _ := generator.Preset("snowflake")
	lost := uint64(ws[1])
	slot := coordinator.Slot{Datacenter: lost >> l.WorkerBits, Worker: lost & (l.WorkerLimit() - 1)}
	insp := inspector(t, e.Endpoints, n.cfg.Cluster)
	if err := insp.ForceRelease(ctx(t), "default", slot); err != nil {
		close(stop)
		wg.Wait()
		t.Fatalf("ForceRelease: %v", err)
	}
	sawDegraded := false
	deadline = time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		info := n.genInfo(t, "default")
		if !info.GetServing() {
			t.Errorf("the generator stopped serving after one of three leases was lost: %s", info.GetReason())
			break
		}
		if len(info.GetWorkers()) == 2 {
			sawDegraded = true
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	if !sawDegraded {
		t.Errorf("Info never showed two workers after one lease was lost")
	}
	deadline = time.Now().Add(10 * time.Second)
	for len(n.genInfo(t, "default").GetWorkers()) < 3 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	awaitCalls(t, &calls, calls.Load()+3) // and after the workers are back
	close(stop)
	wg.Wait()
	if len(errs) > 0 {
		t.Fatalf("%d calls failed while one worker's lease was lost; first: %v", len(errs), errs[0])
	}
	if got := n.genInfo(t, "default").GetWorkers(); len(got) != 3 {
		t.Fatalf("workers %v after the loss: want three again", got)
	}
	seen := map[uint64]bool{}
	total := 0
	for _, mine := range all {
		increasing(t, "a caller's IDs across the lease loss", mine)
		for _, id := range mine {
			if seen[id] {
				t.Fatalf("ID %d issued twice", id)
			}
			seen[id] = true
		}
		total += len(mine)
	}
	if total == 0 {
		t.Fatal("no IDs issued")
	}
}

// A wide generator held out (NTP says the clock is off) while its
// coordinator is frozen for longer than the reservation window: every
// member's reservation runs out and each leaves the source. NTP agrees
// again, then the coordinator comes back, and the members come back one
// by one. Each must come back serving: before, a member that rejoined
// after the generator was let go kept the hold it got when the generator
// was held, and while Info said SERVING with both workers, every bulk
// call reaching that member was refused "not serving" with a cause the
// state did not hold.
func TestWideMembersRejoinServing(t *testing.T) {
	procs := etcdtest.StartCluster(t, 1)
	ntp := ntptest.NewServer(t)
	n := startNode(t, procs.Endpoints(), t.TempDir(), workers(2), ntpServers(time.Second, ntp.Addr()), func(c *core.Config) {
		c.Timing.LeaseTTL, c.Timing.Timeout, c.Timing.ReservationWindow = 10*time.Second, 500*time.Millisecond, 2500*time.Millisecond
	})
	waitServing(t, n.ids, "default", 10*time.Second)
	deadline := time.Now().Add(10 * time.Second)
	for len(n.genInfo(t, "default").GetWorkers()) < 2 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if ws := n.genInfo(t, "default").GetWorkers(); len(ws) != 2 {
		t.Fatalf("workers %v, want 2", ws)
	}
	c := &caller{t: t, n: n}
	c.batch(20_000)

	ntp.SetOffset(2 * time.Second) // beyond --max-clock-offset 250ms
	waitNotServing(t, n.ids, "default", 5*time.Second)
	_, err := n.ids.NextIDs(ctx(t), &firnv1.NextIDsRequest{Count: 20_000})
	wantInfo(t, "NextIDs(20000) during the NTP hold", err, "NTP_OFFSET", nil)

	// The coordinator frozen past the window (not the lease TTL): the
	// reservations run out and both members leave the source.
	procs.Members[0].Freeze(t)
	thawed := false
	defer func() {
		if !thawed {
			procs.Members[0].Thaw(t)
		}
	}()
	deadline = time.Now().Add(8 * time.Second)
	for len(n.genInfo(t, "default").GetWorkers()) > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("workers %v still in the source 8 s into the freeze", n.genInfo(t, "default").GetWorkers())
		}
		time.Sleep(50 * time.Millisecond)
	}
	// NTP agrees again while the members are out, then the coordinator
	// comes back: the members rejoin, one by one, the generator serving.
	ntp.SetOffset(0)
	time.Sleep(1500 * time.Millisecond)
	procs.Members[0].Thaw(t)
	thawed = true
	waitServing(t, n.ids, "default", 15*time.Second)
	deadline = time.Now().Add(10 * time.Second)
	for len(n.genInfo(t, "default").GetWorkers()) < 2 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if ws := n.genInfo(t, "default").GetWorkers(); len(ws) != 2 {
		t.Fatalf("workers %v after the coordinator came back, want 2", ws)
	}
	refused := 0
	var first error
	for range 20 {
		resp, err := n.ids.NextIDs(ctx(t), &firnv1.NextIDsRequest{Count: 20_000})
		if err != nil {
			if info := n.genInfo(t, "default"); info.GetServing() {
				refused++
				if first == nil {
					first = err
				}
			}
			continue
		}
		c.seen = append(c.seen, resp.GetIds()...)
	}
	if refused > 0 {
		t.Fatalf("%d of 20 NextIDs(20000) refused while the generator says it serves with both workers; first: %v", refused, first)
	}
	increasing(t, "one caller's IDs across the hold", c.seen)
}

// sonyflake puts the sequence above the worker: with two workers one
// caller's IDs still increase, across NextIDs, NextID and NextRange (runs
// of one ID each). Before, 117 of 200 NextIDs(300) held an ID lower than
// the one before.
func TestWideSeqAboveWorkerOrder(t *testing.T) {
	e := etcdtest.StartEmbedded(t)
	n := startNode(t, e.Endpoints, t.TempDir(), workers(2), generators("s=sonyflake"))
	waitServing(t, n.ids, "s", 10*time.Second)
	deadline := time.Now().Add(10 * time.Second)
	for len(n.genInfo(t, "s").GetWorkers()) < 2 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if ws := n.genInfo(t, "s").GetWorkers(); len(ws) != 2 {
		t.Fatalf("workers %v, want 2", ws)
	}
	c := &caller{t: t, n: n, gen: "s"}
	for i := range 200 {
		c.batch(300)
		if i%20 == 0 {
			c.one()
			c.rangeIDs(700)
		}
	}
	increasing(t, "one caller's sonyflake IDs from two workers", c.seen)
	l, _ := generator.Preset("sonyflake")
	workersSeen := map[uint64]bool{}
	for _, id := range c.seen {
		p, err := l.Decode(id)
		if err != nil {
			t.Fatal(err)
		}
		workersSeen[p.Worker] = true
	}
	if len(workersSeen) != 2 {
		t.Fatalf("IDs of workers %v: want both workers to have served", workersSeen)
	}
}

// awaitCalls waits until calls reaches n, failing t after 10 s: a sleep in
// its place lets a slow machine run the fault, or end the load, before any
// call of the phase was made.
func awaitCalls(t *testing.T, calls *atomic.Int64, n int64) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); calls.Load() < n; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d calls answered in 10 s, want %d", calls.Load(), n)
		}
	}
}
