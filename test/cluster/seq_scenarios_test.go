package cluster

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	firnv1 "github.com/firnid/firn/client/firnv1"
	"github.com/firnid/firn/clockguard"
	"github.com/firnid/firn/internal/seqcheck"
	"github.com/firnid/firn/seq"
)

// seqScenarios: three nodes serve a per-key sequence generator (sections
// leased by their owners, each key's values in its owner's memory, each
// section's maximum written ahead in the coordinator; docs/design.md,
// Per-key sequences) beside the default snowflake one, under a load of
// routed callers over 10,000 keys (SeqLoad: NextSeq, NextSeqs split by
// owner, CurrentSeq), through a node killed, a node frozen past its
// lease, the coordinator's leader lost and a rolling restart. Every call
// that returned values is checked by seqcheck (per key: no value twice,
// and a call that returned before another began got values all below
// the later one's), every CurrentSeq against the values of its key
// returned before it began; the calls may fail only inside the fault's
// window, for its causes; each node hands out values.
//
// All but the coordinator's fault run beside the others. Alone:
//
//	go test -race -count=1 ./test/cluster -run 'TestChaos/(^seq|^beside$)/(^seq|^etcd$|^zookeeper$)'
//
// (-run splits its pattern at a | outside parentheses first.)
var seqScenarios = []scenario{
	{name: "seq: kill -9 of one node of three, restarted", beside: true, both: true, run: func(e *env) {
		ns := e.seqNodes(e.ttlFlags()...)
		e.startSeq(ns...)
		load := e.startSeqLoad(ns, e.hotOn(ns[0]))
		// The hot key's values climb past a few write-ahead steps (above
		// half its section's maximum: a new owner starting anywhere below
		// that maximum hands out values it already gave).
		time.Sleep(3500 * time.Millisecond)
		owned := e.sectionsOf(ns[0])
		killed := time.Now()
		ns[0].Kill()
		// Its sections' leases end with their TTL; the others take them,
		// settle and serve. n1 stays down until each one served again.
		took := e.waitMoved(load, owned, "n1", killed, e.ttl()+10*time.Second)
		e.row.Recover = recoverFigure(took, e.ttl())
		e.t.Logf("after the kill, as the new owners logged it: %s", e.takesSince(ns[1:], owned, killed))
		restarted := time.Now()
		ns[0].Start()
		back := e.waitBack(load, ns, ns[0], restarted, 20*time.Second)
		e.t.Logf("n1's sections %v served by a new owner %s after the kill; n1 restarted, serving its share again %v later",
			owned, e.row.Recover, back.Round(time.Millisecond))
		window := []fault{
			{node: "n1", from: killed, cutOff: true, causes: seqMoving},
			{from: killed, causes: seqSectionMoving},
		}
		for i := range window {
			window[i] = window[i].until(time.Now())
		}
		time.Sleep(time.Second)
		e.seqEnd(load, within(window...))
		e.seqFrom(load, ns[0], 2, restarted)
	}},
	{name: "seq: SIGSTOP of one node of three past the lease TTL, resumed", beside: true, both: true, run: func(e *env) {
		ns := e.seqNodes(e.ttlFlags()...)
		e.startSeq(ns...)
		// A hop to the frozen node gives up after a second, as a client
		// would, and tries another node.
		hot := e.hotOn(ns[0])
		load := e.startSeqLoad(ns, func(o *SeqLoadOptions) { hot(o); o.AttemptTimeout = time.Second })
		time.Sleep(1500 * time.Millisecond)
		owned := e.sectionsOf(ns[0])
		frozen := time.Now()
		ns[0].Freeze()
		took := e.waitMoved(load, owned, "n1", frozen, e.ttl()+10*time.Second)
		e.t.Logf("after the freeze, as the new owners logged it: %s", e.takesSince(ns[1:], owned, frozen))
		if time.Since(frozen) < e.ttl()+time.Second {
			time.Sleep(e.ttl() + time.Second - time.Since(frozen))
		}
		// Calls straight to n1 the moment it resumes, for keys its old
		// sections' new owners already answered: n1 must not answer them
		// from what it held (its lease ended while it was stopped); should
		// it, the checker sees a value below one returned before.
		probe := e.probeAfterThaw(load, ns[0], owned, frozen)
		thawed := time.Now()
		back := e.waitBack(load, ns, ns[0], thawed, 20*time.Second)
		pr := probe()
		e.row.Recover = recoverFigure(took, e.ttl()) + fmt.Sprintf("; back %v after resume", back.Round(time.Millisecond))
		e.t.Logf("n1 stopped: its sections %v served elsewhere %s; resumed: probes %s; its share served again %v later",
			owned, recoverFigure(took, e.ttl()), pr, back.Round(time.Millisecond))
		// Resumed, n1 finds its coordinator session gone (ZooKeeper: it
		// expired while n1 was stopped) and refuses, naming that, until it
		// has a new one.
		window := []fault{
			{node: "n1", from: frozen, cutOff: true, causes: slices.Concat(seqMoving, coordinatorLost)},
			{from: frozen, causes: seqSectionMoving},
		}
		for i := range window {
			window[i] = window[i].until(time.Now())
		}
		time.Sleep(time.Second)
		e.seqEnd(load, within(window...))
		// Its sections came back: n1 answered for them after it resumed.
		back1 := 0
		for _, c := range load.Calls() {
			if c.Node == "n1" && slices.Contains(owned, c.Section) && c.Start > load.At(thawed) {
				back1++
			}
		}
		if back1 == 0 {
			e.t.Errorf("n1 answered no call for its old sections %v after it resumed", owned)
		}
	}},
	{name: "seq: coordinator leader killed (one member lost), restarted", both: true, run: func(e *env) {
		ns := e.seqNodes()
		e.startSeq(ns...)
		load := e.startSeqLoad(ns, e.hotOn(ns[0]))
		time.Sleep(time.Second)
		lost := time.Now()
		e.killLeader(4 * time.Second)
		// Every node serves the generator, every section owned and served.
		d := e.waitMap(ns, 20*time.Second)
		window := fault{from: lost, causes: slices.Concat(seqSectionMoving, coordinatorLost)}.until(time.Now())
		time.Sleep(2 * time.Second)
		// The time to recover is the longest any section went unanswered
		// across the fault (the load calls each about every 10 ms).
		gap, sec := longestGap(load, lost, window.to)
		e.row.Recover = fmt.Sprintf("longest section gap %v", gap.Round(10*time.Millisecond))
		e.t.Logf("the section map whole again %v after the member's restart; the longest time a section went unanswered: %v (section %d)",
			d.Round(time.Millisecond), gap.Round(time.Millisecond), sec)
		if e.b.name == "etcd" {
			e.etcd.WaitCaughtUp(e.t) // the next scenario shares the cluster
		}
		e.seqEnd(load, within(window))
	}},
	{name: "seq: rolling restart of three nodes (SIGTERM, one at a time)", beside: true, both: true, run: func(e *env) {
		ns := e.seqNodes()
		e.startSeq(ns...)
		load := e.startSeqLoad(ns, e.hotOn(ns[0]))
		time.Sleep(time.Second)
		var took []time.Duration
		var window []fault
		restarted := map[*Node]time.Time{}
		for _, n := range ns {
			owned := e.sectionsOf(n)
			stopAt := time.Now()
			if code := n.Stop(20 * time.Second); code != 0 {
				e.t.Errorf("%s: SIGTERM exit code %d, want 0", n.Name, code)
			}
			// A graceful stop frees its sections' leases at once: the
			// others take them without waiting for a TTL.
			took = append(took, e.waitMoved(load, owned, n.Name, stopAt, 10*time.Second)...)
			restarted[n] = time.Now()
			n.Start()
			e.waitBack(load, ns, n, restarted[n], 20*time.Second)
			window = append(window,
				fault{node: n.Name, from: stopAt, cutOff: true, causes: slices.Concat(seqMoving, []clockguard.Code{clockguard.CodeDraining})}.until(time.Now()),
				fault{from: stopAt, causes: seqSectionMoving}.until(time.Now()))
			time.Sleep(500 * time.Millisecond)
		}
		e.row.Recover = recoverFigure(took, 0)
		time.Sleep(500 * time.Millisecond)
		e.seqEnd(load, within(window...))
		for _, n := range ns {
			e.seqFrom(load, n, 2, restarted[n])
		}
	}},
}

// seqGen is the sequence generator of seqScenarios, seqSections its
// sections: about five for each of three nodes.
const (
	seqGen      = "chats"
	seqSections = 16
)

// seqSectionMoving is the cause a sequence call may be refused with by
// any node while sections move: the section between owners; seqMoving
// adds the faulted node's own start (it serves once its share of the
// sections serves).
var (
	seqSectionMoving = []clockguard.Code{"SECTION_MOVING"}
	seqMoving        = []clockguard.Code{"SECTION_MOVING", clockguard.CodeStarting}
)

// seqNodes prepares n1, n2, n3 with the default snowflake generator and
// the sequence generator.
func (e *env) seqNodes(extra ...string) []*Node {
	var ns []*Node
	for i := 1; i <= 3; i++ {
		ns = append(ns, e.newNode(fmt.Sprintf("n%d", i),
			append([]string{"--generator", "default=snowflake", "--generator", fmt.Sprintf("%s=seq,sections=%d", seqGen, seqSections)}, extra...)...))
	}
	return ns
}

// startSeq starts the nodes and waits until each serves the sequence
// generator and the section map is whole (waitMap). The snowflake
// default's restore guard is not waited for: no scenario here calls it.
func (e *env) startSeq(ns ...*Node) {
	e.t.Helper()
	for _, n := range ns {
		n.Start()
	}
	for _, n := range ns {
		if _, ok := waitFor(20*time.Second, func() bool { ok, _ := n.Serving(seqGen); return ok }); !ok {
			_, why := n.Serving(seqGen)
			e.t.Fatalf("node %s: the sequence generator not serving after 20s: %s", n.Name, why)
		}
	}
	e.waitMap(ns, 20*time.Second)
}

// startSeqLoad starts the scenarios' sequence load on ns: five callers,
// one call in twenty a NextSeqs of 20 keys, one a CurrentSeq, each caller
// pausing 4 ms between calls (with the hot key's caller, hotOn, about
// 800 calls a second: each section answered every 20 ms or so, and a
// 2-core machine left to the scenarios beside).
func (e *env) startSeqLoad(ns []*Node, f func(o *SeqLoadOptions)) *SeqLoad {
	o := SeqLoadOptions{Generator: seqGen, Sections: seqSections, Keys: 10_000, Callers: 5, Deadline: callDeadline,
		Pause: 4 * time.Millisecond, BatchPct: 5, BatchKeys: 20, CurrentPct: 5}
	if f != nil {
		f(&o)
	}
	return StartSeqLoad(e.rec, ns, o)
}

// hotOn sets the load's hot key to one of a section n serves, asked for
// every 2 ms.
func (e *env) hotOn(n *Node) func(o *SeqLoadOptions) {
	e.t.Helper()
	mine := e.sectionsOf(n)
	def := seq.Definition{Sections: seqSections}
	for i := 0; ; i++ {
		k := fmt.Sprintf("hot%d", i)
		if slices.Contains(mine, def.Section(seq.Hash([]byte(k)))) {
			return func(o *SeqLoadOptions) { o.Hot, o.HotPause = k, 2*time.Millisecond }
		}
	}
}

// seqInfo is the sequence generator's Info on n.
func seqInfo(n *Node) (*firnv1.GeneratorInfo, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	info, err := n.ID.Info(ctx, &firnv1.InfoRequest{})
	if err != nil {
		return nil, err
	}
	for _, g := range info.GetGenerators() {
		if g.GetName() == seqGen {
			return g, nil
		}
	}
	return nil, fmt.Errorf("node %s: no generator %q in Info", n.Name, seqGen)
}

// sectionsOf is the sections n serves, as its Info says.
func (e *env) sectionsOf(n *Node) []int {
	e.t.Helper()
	g, err := seqInfo(n)
	if err != nil {
		e.t.Fatal(err)
	}
	var out []int
	for _, o := range g.GetSectionOwners() {
		if o.GetNode() == n.Name && o.GetServing() {
			out = append(out, int(o.GetSection()))
		}
	}
	if len(out) == 0 {
		e.t.Fatalf("node %s serves no section: %v", n.Name, g.GetSectionOwners())
	}
	return out
}

// waitMap waits until every node of ns shows the same whole section map:
// every section owned by one of ns, each node owning some and serving
// what it owns.
func (e *env) waitMap(ns []*Node, d time.Duration) time.Duration {
	e.t.Helper()
	var last string
	took, ok := waitFor(d, func() bool {
		var ref []string
		for _, n := range ns {
			g, err := seqInfo(n)
			if err != nil {
				last = err.Error()
				return false
			}
			if len(g.GetSectionOwners()) != seqSections {
				last = fmt.Sprintf("%s shows %d sections", n.Name, len(g.GetSectionOwners()))
				return false
			}
			m := make([]string, seqSections)
			per := map[string]int{}
			for _, o := range g.GetSectionOwners() {
				if o.GetNode() == "" || !o.GetServing() {
					last = fmt.Sprintf("%s: section %d owned by %q, serving %v", n.Name, o.GetSection(), o.GetNode(), o.GetServing())
					return false
				}
				m[o.GetSection()] = o.GetNode()
				per[o.GetNode()]++
			}
			if len(per) != len(ns) {
				last = fmt.Sprintf("%s: sections per owner %v", n.Name, per)
				return false
			}
			if ref != nil && !slices.Equal(ref, m) {
				last = fmt.Sprintf("the nodes' maps differ: %v and %s's %v", ref, n.Name, m)
				return false
			}
			ref = m
		}
		return true
	})
	if !ok {
		e.t.Fatalf("the section map not whole after %v: %s", d, last)
	}
	return took
}

// waitMoved waits until each of sections has been answered for by a node
// other than from, in a call that returned after since, and returns the
// times from since to each first answer.
func (e *env) waitMoved(load *SeqLoad, sections []int, from string, since time.Time, d time.Duration) []time.Duration {
	e.t.Helper()
	first := map[int]time.Duration{}
	at := load.At(since)
	scan := func() bool {
		for _, c := range load.Calls() {
			if c.Node != from && c.End >= at && slices.Contains(sections, c.Section) {
				if f, ok := first[c.Section]; !ok || c.End-at < f {
					first[c.Section] = c.End - at
				}
			}
		}
		return len(first) == len(sections)
	}
	if _, ok := waitFor(d, scan); !ok {
		var missing []int
		for _, s := range sections {
			if _, ok := first[s]; !ok {
				missing = append(missing, s)
			}
		}
		e.t.Fatalf("sections %v of %s answered by no other node %v after the fault (of %v)", missing, from, d, sections)
	}
	var out []time.Duration
	for _, s := range sections {
		out = append(out, first[s])
	}
	return out
}

// waitBack waits until n serves the generator again, the section map is
// whole, and n's process answered a call begun after since; it returns
// the time from since.
func (e *env) waitBack(load *SeqLoad, ns []*Node, n *Node, since time.Time, d time.Duration) time.Duration {
	e.t.Helper()
	if _, ok := waitFor(d, func() bool { ok, _ := n.Serving(seqGen); return ok }); !ok {
		_, why := n.Serving(seqGen)
		e.t.Fatalf("node %s: the sequence generator not serving %v after %s: %s", n.Name, d, since.Format("15:04:05.000"), why)
	}
	e.waitMap(ns, d)
	at := load.At(since)
	if _, ok := waitFor(d, func() bool {
		for _, c := range load.Calls() {
			if c.Node == n.Name && c.Start > at {
				return true
			}
		}
		return false
	}); !ok {
		e.t.Fatalf("node %s answered no call begun after %s", n.Name, since.Format("15:04:05.000"))
	}
	return time.Since(since)
}

// recoverFigure is the row's time to recover: the largest of the times
// each section took to be answered for by a new owner (with a dozen
// sections or so its p99 is its maximum), the median, and the lease TTL
// they are to be read against.
func recoverFigure(took []time.Duration, ttl time.Duration) string {
	s := slices.Clone(took)
	slices.Sort(s)
	if len(s) == 0 {
		return ""
	}
	f := fmt.Sprintf("p99=max %v, p50 %v (%d sections)", s[len(s)-1].Round(10*time.Millisecond), s[len(s)/2].Round(10*time.Millisecond), len(s))
	if ttl > 0 {
		f += fmt.Sprintf(", TTL %v", ttl)
	}
	return f
}

// takesSince says when nodes logged taking sections, and serving them,
// since t (the latest of each, from t): where a section's move spends its
// time — its old lease ending and the take, then the take's settle.
func (e *env) takesSince(nodes []*Node, sections []int, t time.Time) string {
	var taken, serving time.Time
	n := 0
	for _, nd := range nodes {
		for _, m := range nd.LogLines() {
			msg, _ := m["msg"].(string)
			if msg != "sequence section taken" && msg != "sequence section serving" {
				continue
			}
			sec, _ := m["section"].(float64)
			ts, _ := m["time"].(string)
			at, err := time.Parse(time.RFC3339Nano, ts)
			if err != nil || at.Before(t) || !slices.Contains(sections, int(sec)) {
				continue
			}
			if msg == "sequence section taken" {
				n++
				if at.After(taken) {
					taken = at
				}
			} else if at.After(serving) {
				serving = at
			}
		}
	}
	if n == 0 {
		return "no take logged"
	}
	return fmt.Sprintf("%d takes, the last %v after, serving %v after", n, taken.Sub(t).Round(10*time.Millisecond), serving.Sub(t).Round(10*time.Millisecond))
}

// longestGap is the longest time between two answers for one section
// (returned calls, by their ends) over a stretch that overlaps [from, to],
// and the section.
func longestGap(load *SeqLoad, from, to time.Time) (time.Duration, int) {
	ends := map[int][]time.Duration{}
	for _, c := range load.Calls() {
		ends[c.Section] = append(ends[c.Section], c.End)
	}
	a, b := load.At(from), load.At(to)
	var worst time.Duration
	sec := -1
	for s, es := range ends {
		slices.Sort(es)
		for i := 1; i < len(es); i++ {
			if es[i] >= a && es[i-1] <= b && es[i]-es[i-1] > worst {
				worst, sec = es[i]-es[i-1], s
			}
		}
	}
	return worst, sec
}

// probeAfterThaw thaws n and, from that moment, sends calls straight to
// n (no routing) for 1.5 s: NextSeq of keys in sections, answered since
// since by other nodes. Each answer is kept with the load's calls, for
// the checker. The function it returns waits for the probes and says how
// n answered.
func (e *env) probeAfterThaw(load *SeqLoad, n *Node, sections []int, since time.Time) func() string {
	at := load.At(since)
	var keys []string
	seen := map[string]bool{}
	for _, c := range load.Calls() {
		if c.Node != n.Name && c.End >= at && slices.Contains(sections, c.Section) && !seen[c.Key] {
			seen[c.Key] = true
			keys = append(keys, c.Key)
		}
	}
	if len(keys) == 0 {
		e.t.Fatalf("no key of %s's old sections %v was answered elsewhere while it was stopped", n.Name, sections)
	}
	var mu sync.Mutex
	outcomes := map[string]int{}
	var wg sync.WaitGroup
	start := make(chan struct{})
	end := time.Now().Add(e.ttl() + 1500*time.Millisecond) // re-set at the thaw
	for p := range 4 {
		wg.Go(func() {
			<-start
			for i := p; time.Now().Before(end); i += 4 {
				key := keys[i%len(keys)]
				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				s := load.now()
				resp, err := n.ID.NextSeq(ctx, &firnv1.NextSeqRequest{Generator: seqGen, Key: []byte(key), Count: 1})
				en := load.now()
				cancel()
				what := "answered"
				if err != nil {
					what = "refused " + reasonOf(err)
				} else {
					load.add(SeqCall{Call: seqcheck.Call{Key: key, First: resp.GetFirst(), Count: uint64(resp.GetCount()), Start: s, End: en,
						Who: fmt.Sprintf("probe %d straight to %s after its resume", p, n.Name)}, Node: n.Name, Section: load.section(key)})
				}
				mu.Lock()
				outcomes[what]++
				mu.Unlock()
				time.Sleep(5 * time.Millisecond)
			}
		})
	}
	n.Thaw()
	end = time.Now().Add(1500 * time.Millisecond)
	close(start)
	return func() string {
		wg.Wait()
		mu.Lock()
		defer mu.Unlock()
		var parts []string
		for k, v := range outcomes {
			parts = append(parts, fmt.Sprintf("%s %d", k, v))
		}
		sort.Strings(parts)
		return fmt.Sprintf("%d keys: %s", len(keys), strings.Join(parts, ", "))
	}
}

// seqFrom requires values answered by process run of n in calls begun
// after since.
func (e *env) seqFrom(load *SeqLoad, n *Node, run int, since time.Time) {
	e.t.Helper()
	at := load.At(since)
	k := 0
	for _, c := range load.Calls() {
		if c.Node == n.Name && c.Run == run && c.Start > at {
			k++
		}
	}
	if k == 0 {
		e.t.Errorf("node %s (process %d) answered no sequence call begun after %s", n.Name, run, since.Format("15:04:05.000"))
	}
}

// seqEnd ends a sequence scenario: it drains the load, counts its
// failures (ok: the expected ones), checks every call that returned
// values (seqcheck) and every CurrentSeq answer, and requires values from
// each node, NextSeqs items and CurrentSeq answers among them.
func (e *env) seqEnd(load *SeqLoad, ok func(Failure) bool) {
	e.t.Helper()
	load.Drain()
	fs := e.rec.Failures()
	countFailures(e, fs, ok)
	causes := map[string]int{}
	for _, f := range fs {
		why := f.Reason
		if why == "" {
			why = f.Code.String()
		}
		causes[f.Node+" "+why]++
	}
	calls := load.Calls()
	var cs []seqcheck.Call
	per := map[string]uint64{}
	var values uint64
	batch := 0
	for _, c := range calls {
		cs = append(cs, c.Call)
		per[c.Node] += c.Count
		values += c.Count
		if c.Batch {
			batch++
		}
	}
	e.checked = true
	e.row.IDs = int(values)
	vs := seqcheck.Check(cs, 20)
	for _, v := range vs {
		e.t.Errorf("per-key rule broken: %v", v)
	}
	currents := load.Currents()
	for _, p := range CheckCurrents(calls, currents, 20) {
		e.t.Error(p)
	}
	hot, hotTop := 0, uint64(0)
	for _, c := range calls {
		if c.Key == load.o.Hot {
			hot++
			hotTop = max(hotTop, c.Last())
		}
	}
	e.t.Logf("checked %d calls (%d values, %d of them NextSeqs items; %d calls of the hot key %q, its highest value %d), %d CurrentSeq answers: %d violations; values by node %v; %d WRONG_NODE refusals followed; failed calls by node and cause: %v",
		len(calls), values, batch, hot, load.o.Hot, hotTop, len(currents), len(vs), per, load.Hops(), causes)
	for _, n := range e.nodes {
		if per[n.Name] < minIDs {
			e.t.Errorf("node %s handed out %d values; a scenario must see at least %d from each", n.Name, per[n.Name], minIDs)
		}
	}
	if batch == 0 || len(currents) == 0 {
		e.t.Errorf("%d NextSeqs items and %d CurrentSeq answers: the load must make both", batch, len(currents))
	}
}
