package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/firnid/firn/clockguard"
	"github.com/firnid/firn/coordinator"
	"github.com/firnid/firn/coordinator/etcd"
	"github.com/firnid/firn/coordinator/zookeeper"
	"github.com/firnid/firn/segment"
)

// segmentScenarios: three nodes serve a segment generator (dense IDs
// from a counter the coordinator keeps; docs/design.md, Segment counters)
// beside the default snowflake generator, under unary, batch and range
// load on both, through a node killed, a node frozen past its lease, the
// coordinator's leader lost, a -1 h clock step and a graceful restart.
// Every scenario checks the IDs received (uniqueness per generator,
// per-caller order — for the segment generator per node process — and,
// for the snowflake one, holder intervals and disorder), then stops every
// node gracefully and checks the segment IDs against the counter as the
// coordinator keeps it (CheckCounter): each claimed, none handed back
// after it was handed out; with only graceful stops, none lost.
//
// All but the coordinator's fault run beside the others. Alone:
//
//	go test -race -count=1 ./test/cluster -run 'TestChaos/(^segment|^beside$)/(^segment|^etcd$|^zookeeper$)'
//
// (-run splits its pattern at a | outside parentheses first.)
var segmentScenarios = []scenario{
	{name: "segment: kill -9 of one node of three, restarted", beside: true, both: true, run: func(e *env) {
		ns := e.segmentNodes()
		e.startSegment(ns...)
		load := startSegmentLoad(e, ns)
		time.Sleep(1500 * time.Millisecond)
		killed := time.Now()
		ns[0].Kill()
		// The others serve alone for a while: their calls must not fail.
		time.Sleep(time.Second)
		ns[0].Start()
		d := e.waitServing(ns[0], guardWait+8*time.Second)
		e.row.Recover = d.Round(time.Millisecond).String()
		kill := fault{node: "n1", from: killed, cutOff: true, causes: restarting}.until(time.Now())
		time.Sleep(time.Second)
		// What the killed process held unused is lost (counted, not a
		// problem); nothing may be given out twice, and the new process
		// must have given out IDs beside what the old one did.
		e.segmentEnd(load, false, within(kill), Bounds{})
		e.segmentFrom(ns[0], 2, time.Time{})
	}},
	{name: "segment: SIGSTOP of one node of three past the lease TTL, resumed", beside: true, both: true, run: func(e *env) {
		ns := e.segmentNodes(e.ttlFlags()...)
		e.startSegment(ns...)
		load := startSegmentLoad(e, ns)
		time.Sleep(time.Second)
		frozen := time.Now()
		ns[0].Freeze()
		time.Sleep(e.ttl() + 2*time.Second)
		ns[0].Thaw()
		thawed := time.Now()
		// Its snowflake generator lost its lease and takes one again; its
		// segment generator goes on from the claims it holds (a claim is
		// the node's for good: no lease bounds it).
		d := e.waitServing(ns[0], 15*time.Second)
		e.row.Recover = d.Round(time.Millisecond).String()
		stopped := fault{node: "n1", from: frozen, cutOff: true, causes: leaseLost}.until(time.Now())
		time.Sleep(time.Second)
		// The freeze stops the ring's freshness tick with the node (as in
		// "SIGSTOP past the lease TTL").
		e.segmentEnd(load, false, within(stopped), Bounds{Skew: thawed.Sub(frozen)})
		// The paused node gave out segment IDs after it resumed, all
		// unique (check 1) and above its own earlier ones (check 3).
		e.segmentFrom(ns[0], 1, thawed)
	}},
	{name: "segment: coordinator leader killed (one member lost), restarted", both: true, run: func(e *env) {
		ns := e.segmentNodes()
		e.startSegment(ns...)
		load := startSegmentLoad(e, ns)
		time.Sleep(time.Second)
		lost := time.Now()
		e.killLeader(4 * time.Second)
		// Every node serves both generators again.
		var worst time.Duration
		for _, n := range ns {
			worst = max(worst, e.waitServing(n, 20*time.Second))
		}
		e.row.Recover = "≤ " + worst.Round(time.Millisecond).String()
		back := fault{from: lost, causes: coordinatorLost}.until(time.Now())
		time.Sleep(2 * time.Second)
		if e.b.name == "etcd" {
			e.etcd.WaitCaughtUp(e.t) // the next scenario shares the cluster
		}
		// A claim whose reply the election lost may have landed: its IDs
		// are lost (counted), never given out twice.
		e.segmentEnd(load, false, within(back), Bounds{})
	}},
	{name: "segment: clock -1h on one node of three: its segment generator keeps serving", beside: true, both: true, run: func(e *env) {
		ns := e.segmentNodes()
		e.startSegment(ns...)
		time.Sleep(2 * time.Second) // every node has seen the others' heartbeats
		load := startSegmentLoad(e, ns)
		time.Sleep(500 * time.Millisecond)
		stepAt := time.Now()
		if err := ns[0].SetOffset(-time.Hour); err != nil {
			e.t.Fatal(err)
		}
		// The step took: the snowflake default stops (rolled back beyond
		// max-lead, then the peers' outlier).
		d, body, err := ns[0].WaitNotReady(3 * time.Second)
		if err != nil {
			e.t.Fatal(err)
		}
		e.row.FailClosed = d.Round(time.Millisecond).String()
		e.t.Logf("n1 stepped -1h: %s", body)
		// Through the step the segment generator serves, and says so.
		for end := time.Now().Add(3 * time.Second); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
			if ok, why := ns[0].Serving(segGen); !ok {
				e.t.Errorf("n1's segment generator stopped %v after a -1h clock step: %s",
					time.Since(stepAt).Round(time.Millisecond), why)
				break
			}
		}
		correctedAt := time.Now()
		ns[0].SetOffset(0)
		// Its calls went on succeeding (no segment call may fail, below)
		// and on being answered: at least minIDs IDs during the step.
		during := 0
		for _, r := range e.rec.IDs() {
			if r.Generator == segGen && r.Node == "n1" && r.Sent.After(stepAt) && r.At.Before(correctedAt) {
				during++
			}
		}
		if during < minIDs {
			e.t.Errorf("n1's segment generator gave out %d IDs during the step; want at least %d", during, minIDs)
		}
		r, err := ns[0].WaitReady(10 * time.Second)
		if err != nil {
			e.t.Fatal(err)
		}
		e.row.Recover = r.Round(time.Millisecond).String()
		step := fault{node: "n1", from: stepAt, causes: backStep}.until(time.Now())
		time.Sleep(time.Second)
		e.segmentEnd(load, false, func(f Failure) bool {
			return f.Generator != segGen && step.allows(f)
		}, Bounds{}) // n1 fails closed on the step: no snowflake ID carries it
	}},
	{name: "segment: graceful restart of one node of three, no ID lost", beside: true, both: true, run: func(e *env) {
		ns := e.segmentNodes()
		e.startSegment(ns...)
		load := startSegmentLoad(e, ns)
		time.Sleep(1500 * time.Millisecond)
		stopAt := time.Now()
		if code := ns[0].Stop(20 * time.Second); code != 0 {
			e.t.Errorf("SIGTERM exit code %d, want 0", code)
		}
		// It handed its unused claims back: the counter's free ranges, or
		// its next lowered where the remainder ended just below it.
		if back := handedBack(ns[0]); back == 0 {
			e.t.Error("n1's graceful stop handed no segment ID back")
		}
		c, err := e.readCounter()
		if err != nil {
			e.t.Fatal(err)
		}
		ns[0].Start()
		d := e.waitServing(ns[0], guardWait+8*time.Second)
		e.row.Recover = d.Round(time.Millisecond).String()
		restart := fault{node: "n1", from: stopAt, cutOff: true, causes: append([]clockguard.Code{clockguard.CodeDraining}, restarting...)}.until(time.Now())
		time.Sleep(1500 * time.Millisecond)
		// Exact: only graceful stops, so the IDs received and the free
		// ranges left are every ID the counter moved past, but for what
		// no one was told of (a call without an answer, a claim whose
		// reply was lost: CheckCounter's Unknown).
		e.segmentEnd(load, true, within(restart), Bounds{})
		// The free ranges at n1's stop were given out again (a claim
		// takes the lowest free range a node may before the counter's
		// next; the restarted n1 may take any).
		if len(c.Free) > 0 {
			again := 0
			for _, r := range e.rec.IDs() {
				if r.Generator == segGen && r.Sent.After(stopAt) && inRanges(c.Free, r.ID) {
					again++
				}
			}
			e.t.Logf("free at n1's stop: %v; %d of their IDs given out again", c.Free, again)
			if again == 0 {
				e.t.Errorf("none of the free ranges %v (n1's remainders) was given out again after its stop", c.Free)
			}
		}
		e.segmentFrom(ns[0], 2, time.Time{})
	}},
}

// segGen is the segment generator of segmentScenarios, segDefFlag its
// definition: IDs from 1000.
const (
	segGen     = "orders"
	segDefFlag = "segment,start=1000"
)

var segDef = func() segment.Definition {
	d, err := segment.ParseDefinition(segDefFlag)
	if err != nil {
		panic(err)
	}
	return d
}()

// backStep are the causes a snowflake generator refuses with on a node
// whose clock stepped back beyond max-lead among peers: the rollback, the
// peers' outlier, and at the correction (a forward step) the step not yet
// confirmed and the reservations held meanwhile.
var backStep = []clockguard.Code{clockguard.CodeClockRollback, clockguard.CodePeerSkew, clockguard.CodeClockStep,
	clockguard.CodeReservationExhausted}

// segmentNodes prepares three nodes n1, n2, n3 with the default snowflake
// generator and the segment generator.
func (e *env) segmentNodes(extra ...string) []*Node {
	var ns []*Node
	for i := 1; i <= 3; i++ {
		ns = append(ns, e.newNode(fmt.Sprintf("n%d", i),
			append([]string{"--generator", "default=snowflake", "--generator", segGen + "=" + segDefFlag}, extra...)...))
	}
	return ns
}

// startSegment starts the nodes and waits until each serves both
// generators.
func (e *env) startSegment(ns ...*Node) {
	e.t.Helper()
	e.startAll(ns...)
	for _, n := range ns {
		e.waitServing(n, 20*time.Second)
	}
}

// waitServing waits until n serves both generators (/readyz is the
// default's) and returns how long it took.
func (e *env) waitServing(n *Node, d time.Duration) time.Duration {
	e.t.Helper()
	start := time.Now()
	if _, err := n.WaitReady(d); err != nil {
		e.t.Fatal(err)
	}
	if _, ok := waitFor(d-time.Since(start), func() bool { ok, _ := n.Serving(segGen); return ok }); !ok {
		_, why := n.Serving(segGen)
		e.t.Fatalf("node %s: the segment generator not serving after %v: %s", n.Name, d, why)
	}
	return time.Since(start)
}

// Serving reports whether the node's /readyz shows generator gen serving,
// and otherwise why not.
func (n *Node) Serving(gen string) (bool, string) {
	_, body := n.Ready()
	var r struct {
		Generators []struct {
			Name, Reason, Cause string
			Serving             bool
		}
	}
	if err := json.Unmarshal([]byte(body), &r); err != nil {
		return false, body
	}
	for _, g := range r.Generators {
		if g.Name == gen {
			return g.Serving, g.Cause + ": " + g.Reason
		}
	}
	return false, fmt.Sprintf("no generator %q in /readyz: %s", gen, body)
}

// segmentLoad is the load of segmentScenarios: on every node, unary calls
// to the default generator, and unary, batch and range calls to the
// segment generator, each caller pausing between calls: three nodes'
// callers running flat out starved a 2-core machine (race-instrumented
// harness) until the snowflake ring's freshness tick lagged, before takes
// read the clock (checkDisorder); the pauses keep the load these
// scenarios were sized for.
type segmentLoad []*Load

func startSegmentLoad(e *env, ns []*Node) segmentLoad {
	o := LoadOptions{Callers: 1, Deadline: 2 * time.Second, Pause: 2 * time.Millisecond}
	with := func(f func(o *LoadOptions)) LoadOptions { o := o; f(&o); return o }
	return segmentLoad{
		StartLoad(e.rec, ns, o),
		StartLoad(e.rec, ns, with(func(o *LoadOptions) { o.Generator = segGen })),
		StartLoad(e.rec, ns, with(func(o *LoadOptions) { o.Generator, o.Batch, o.Pause = segGen, 20, 20*time.Millisecond })),
		StartLoad(e.rec, ns, with(func(o *LoadOptions) { o.Generator, o.Range, o.Pause = segGen, 100, 50*time.Millisecond })),
	}
}

// drain ends every load, recording the answer to every call sent.
func (l segmentLoad) drain() {
	var wg sync.WaitGroup
	for _, x := range l {
		wg.Go(x.Drain)
	}
	wg.Wait()
}

// segmentEnd ends a segment scenario: it drains the load, counts its
// failures (ok: the expected ones), runs the checker (the segment IDs for
// uniqueness and order), requires at least minIDs segment IDs from each
// node, stops every node gracefully (each hands its unused claims back)
// and checks the segment IDs against the counter (CheckCounter; exact:
// none lost but to calls and claims whose outcome is unknown).
func (e *env) segmentEnd(load segmentLoad, exact bool, ok func(Failure) bool, b Bounds) {
	e.t.Helper()
	load.drain()
	fs := e.rec.Failures()
	countFailures(e, fs, ok)
	b.Segment = []string{segGen}
	e.check(b)
	got := e.rec.IDs()
	per := map[string]int{}
	for _, r := range got {
		if r.Generator == segGen {
			per[r.Node]++
		}
	}
	for _, n := range e.nodes {
		if per[n.Name] < minIDs {
			e.t.Errorf("node %s gave out %d segment IDs; a scenario must see at least %d from each", n.Name, per[n.Name], minIDs)
		}
	}
	var wg sync.WaitGroup
	for _, n := range e.nodes {
		wg.Go(func() {
			if code := n.Stop(20 * time.Second); code != 0 {
				e.t.Errorf("node %s: SIGTERM exit code %d, want 0", n.Name, code)
			}
		})
	}
	wg.Wait()
	c, err := e.readCounter()
	if err != nil {
		e.t.Fatal(err)
	}
	unknown, unknownIDs := 0, uint64(0) // segment calls that may have been given IDs never received
	causes := map[string]int{}
	for _, f := range fs {
		if f.Generator == segGen && f.unknownOutcome() {
			unknown++
			unknownIDs += f.Count
		}
		gen, why := f.Generator, f.Reason
		if gen == "" {
			gen = "default"
		}
		if why == "" {
			why = f.Code.String()
		}
		causes[fmt.Sprintf("%s %s %s", f.Node, gen, why)]++
	}
	e.t.Logf("failed calls by node, generator and cause: %v", causes)
	// A claim whose reply was lost (the coordinator's timeout) may have
	// landed, its IDs lost; the nodes log each failed claim, and each
	// failed hand-back.
	claims := 0
	for _, n := range e.nodes {
		for _, m := range n.LogLines() {
			switch m["msg"] {
			case "segment claim failed; retrying":
				claims++
				e.t.Logf("node %s at %v: failed segment claim: %v", n.Name, m["time"], m["err"])
			case "segment remainders not all handed back; they are skipped":
				e.t.Logf("node %s at %v: failed hand-back: %v", n.Name, m["time"], m["err"])
			}
		}
	}
	problems, lost := CheckCounter(got, segGen, segDef, c, exact, Unknown{Calls: unknownIDs, Claims: claims})
	for _, p := range problems {
		e.t.Error(p)
	}
	var free uint64
	for _, f := range c.Free {
		free += f.Len()
	}
	e.t.Logf("segment counter after every node stopped: next %d, seq %d, %d free IDs in %d ranges; %d segment IDs received, %d lost (claimed, never handed out nor back); %d segment calls of unknown outcome (%d IDs)",
		c.Next, c.Seq, free, len(c.Free), per["n1"]+per["n2"]+per["n3"], lost, unknown, unknownIDs)
}

// segmentFrom requires segment IDs given out by process run of n (0:
// any) from calls sent after since.
func (e *env) segmentFrom(n *Node, run int, since time.Time) {
	e.t.Helper()
	k := 0
	for _, r := range e.rec.IDs() {
		if r.Generator == segGen && r.Node == n.Name && (run == 0 || r.Run == run) && r.Sent.After(since) {
			k++
		}
	}
	if k == 0 {
		e.t.Errorf("node %s (process %d) gave out no segment ID after %s", n.Name, run, since.Format("15:04:05.000"))
	}
}

// handedBack is how many segment IDs n's processes logged handing back at
// their graceful stops.
func handedBack(n *Node) uint64 {
	var back uint64
	for _, m := range n.LogLines() {
		if m["msg"] == "segment remainders handed back" && m["generator"] == segGen {
			if v, ok := m["ids"].(float64); ok {
				back += uint64(v)
			}
		}
	}
	return back
}

func inRanges(rs []segment.Range, id uint64) bool {
	for _, r := range rs {
		if id >= r.First && id <= r.Last {
			return true
		}
	}
	return false
}

// readCounter reads the segment generator's counter from the scenario's
// coordinator, through the backend's own client.
func (e *env) readCounter() (segment.Counter, error) {
	clock := clockguard.NewSystem()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	var counters coordinator.Counters
	var closer io.Closer
	switch e.b.name {
	case "etcd":
		cfg := etcd.DefaultConfig()
		cfg.Endpoints, cfg.Cluster, cfg.Clock, cfg.Logger = e.b.endpoints, e.cluster, clock, quiet
		c, err := etcd.New(cfg)
		if err != nil {
			return segment.Counter{}, err
		}
		counters, closer = c, c
	case "zookeeper":
		cfg := zookeeper.DefaultConfig()
		cfg.Servers, cfg.Cluster, cfg.Clock, cfg.Logger = e.b.endpoints, e.cluster, clock, quiet
		c, err := zookeeper.New(cfg)
		if err != nil {
			return segment.Counter{}, err
		}
		counters, closer = c, c
	default:
		return segment.Counter{}, errors.New("no coordinator client for backend " + e.b.name)
	}
	defer closer.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rec, err := counters.ReadCounter(ctx, coordinator.CounterSpec{Generator: segGen, Definition: segDef})
	return rec.State, err
}

// killLeader kills the coordinator's leader (etcd or ZooKeeper), keeps it
// down for down, then starts it again and waits until it serves.
func (e *env) killLeader(down time.Duration) {
	e.t.Helper()
	switch e.b.name {
	case "etcd":
		m := etcdLeader(e)
		e.t.Logf("killing the etcd leader %s", m.Name)
		m.Kill()
		time.Sleep(down)
		m.Restart(e.t)
	case "zookeeper":
		leader, err := e.zk.Leader()
		if err != nil {
			e.t.Fatal(err)
		}
		e.t.Logf("killing the ZooKeeper leader %s", leader.Addr)
		leader.Kill()
		time.Sleep(down)
		if err := leader.Start(); err != nil {
			e.t.Fatal(err)
		}
		if err := leader.WaitReady(20 * time.Second); err != nil {
			e.t.Fatal(err)
		}
	}
}
