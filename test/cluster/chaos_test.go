package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	osexec "os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	firnv1 "github.com/firnid/firn/client/firnv1"
	"github.com/firnid/firn/clockguard"
	"github.com/firnid/firn/generator"
	"github.com/firnid/firn/internal/testing/etcdtest"
	"github.com/firnid/firn/internal/testing/zktest"
)

// chaosBudget is the whole chaos suite's time budget, reported, not
// enforced: a loaded machine must not fail a suite whose every check
// passed. 34 scenario runs took 7 min 38 s on a fresh clone before every
// take on a shared coordinator waited the restore guard (docs/design.md,
// Restores: about 7 s with the harness's flags, once per scenario and
// again at each restart in it); 11 min 30 s after, one after another;
// 7 min 46 s–8 min 5 s with the beside scenarios four at a time, on this
// machine, idle. The ten segment runs add about 90 s alone (two of them,
// a coordinator's leader killed, 16 s and 21 s one after another; eight
// beside, 47 s four at a time); 44 runs took 10 min 1 s on this machine
// shared with other work (load average 10), and 10 min 4 s–10 min 7 s in
// fresh-clone runs of the whole suite. The eight seq runs add two alone
// (a coordinator's leader killed: 8.6–10.9 s) and six beside (10–17 s
// each); 52 runs took 11 min 16 s on this machine shared with two other
// test runs (load average about 5), 24 s of it one segment run waiting
// out its 20 s limit before it failed. In the whole suite the step reached
// 12 min 41 s; then the checker stopped sorting and copying the records
// (millions per scenario, each copy checked byte by byte under -race) and
// it took 9 min 8 s. test/run.sh prints the line.
const chaosBudget = 11 * time.Minute

// Row is one line of the report.
type Row struct {
	Scenario         string  `json:"scenario"`
	Backend          string  `json:"backend"`
	IDs              int     `json:"ids_checked"`
	FailedExpected   int     `json:"calls_failed_expected"`
	FailedUnexpected int     `json:"calls_failed_unexpected"`
	FailClosed       string  `json:"time_to_fail_closed,omitempty"`
	Recover          string  `json:"time_to_recover,omitempty"`
	Verdict          string  `json:"verdict"`
	Seconds          float64 `json:"seconds"`
	order            int     // the scenario's place in scenarios
}

var (
	reportMu sync.Mutex
	report   []Row
)

// backend is one coordinator the scenarios run against.
type backend struct {
	name string
	// endpoints are the real coordinator addresses.
	endpoints []string
	flag      string // "--etcd" or "--zookeeper"
}

// env is one scenario's world.
type env struct {
	t       *testing.T
	b       backend
	cluster string
	rec     *Recorder
	nodes   []*Node
	proxies map[*Node][]*Proxy
	row     *Row
	layout  generator.Layout
	etcd    *etcdtest.Procs
	zk      *zktest.Ensemble
	checked bool // the scenario ran the checker
}

// minIDs is the fewest IDs a scenario's check may see: a checker fed no
// IDs passes whatever the nodes did.
const minIDs = 100

// guardWait is the longest a take waits for the restore guard with the
// harness's flags (docs/design.md, Restores): the default 5 s window plus
// twice the default 1 s --max-peer-skew (max-lead cancels out: the
// generator serves once the clock is within it of the guard). A node on a
// shared coordinator waits it at every start.
const guardWait = 5*time.Second + 2*time.Second

// ttl is the lease TTL of ttlFlags.
func (e *env) ttl() time.Duration {
	if e.b.name == "zookeeper" {
		return 4 * time.Second
	}
	return 3 * time.Second
}

// ttlFlags are the lease flags of scenarios that wait out a lease: the
// shortest the backend allows (ZooKeeper sessions of at least 4 s).
func (e *env) ttlFlags() []string {
	if e.b.name == "zookeeper" {
		return []string{"--lease-ttl", "4s", "--reservation-window", "4500ms"}
	}
	return []string{"--lease-ttl", "3s", "--reservation-window", "4s"}
}

func (e *env) newNode(name string, extra ...string) *Node {
	return e.newNodeOn(name, e.b.endpoints, extra...)
}

// newNodeOn is newNode with the coordinator endpoints given.
func (e *env) newNodeOn(name string, endpoints []string, extra ...string) *Node {
	var addrs []string
	var px []*Proxy
	for _, ep := range endpoints {
		p := NewProxy(e.t, strings.TrimPrefix(strings.TrimPrefix(ep, "http://"), "https://"))
		px = append(px, p)
		addrs = append(addrs, p.Addr())
	}
	// Most scenarios run one or two nodes without NTP, and none is about
	// the unchecked-clock refusal (server/unchecked_test.go is): every node
	// serves on an unchecked clock, as before the refusal existed.
	extra = append([]string{"--unchecked-clock-ok"}, extra...)
	n := NewNode(e.t, name, NodeOptions{Cluster: e.cluster, Coord: []string{e.b.flag, strings.Join(addrs, ",")}, Extra: extra})
	e.proxies[n] = px
	e.nodes = append(e.nodes, n)
	return n
}

// partition sets every proxy of a node.
func (e *env) partition(n *Node, m ProxyMode) {
	for _, p := range e.proxies[n] {
		p.Set(m)
		if m == Blackhole {
			// Blackholed connections stay open; new ones hang too.
			continue
		}
	}
}

func (e *env) startAll(nodes ...*Node) {
	e.t.Helper()
	for _, n := range nodes {
		n.Start()
	}
	for _, n := range nodes {
		if _, err := n.WaitReady(20 * time.Second); err != nil {
			e.t.Fatal(err)
		}
	}
}

// settle lets a load run on for at least d, and on until the recorder
// holds minIDs IDs (at most 10 s more): a scenario whose load runs only
// briefly after its node is ready would give the checker too few IDs on
// a loaded machine (one caller on a node built with -race took 6 ms a
// call under CI's load: 81 IDs in 500 ms).
func (e *env) settle(d time.Duration) {
	e.t.Helper()
	time.Sleep(d)
	for end := time.Now().Add(10 * time.Second); e.rec.Count() < minIDs && time.Now().Before(end); {
		time.Sleep(20 * time.Millisecond)
	}
}

func (e *env) check(b Bounds) {
	e.t.Helper()
	if b.MaxLead == 0 {
		b.MaxLead = time.Second
	}
	if b.MaxStaleness == 0 {
		b.MaxStaleness = 100 * time.Millisecond
	}
	res := Check(e.t, e.layout, e.rec.IDs(), e.nodes, b)
	e.row.IDs = res.IDs
	e.checked = true
	if res.IDs < minIDs {
		e.t.Errorf("the checker saw %d IDs; a scenario must have it check at least %d", res.IDs, minIDs)
	}
}

type scenario struct {
	name string
	// both: run on every backend (a coordinator is involved).
	both bool
	// zkOnly: a ZooKeeper-specific fault.
	zkOnly bool
	// beside: the scenario may run beside the other beside scenarios. It
	// faults only its own nodes and their proxies (never a coordinator
	// process), puts little load on them, and spends most of its time
	// waiting (leases, restore guards, clock checks); run one after
	// another they were half of the suite's time.
	beside bool
	run    func(e *env)
}

// besideParallel is how many beside scenarios run at once.
const besideParallel = 4

func TestChaos(t *testing.T) {
	suiteStart := time.Now()
	etcdProcs := etcdtest.StartCluster(t, 3)
	zk := zktest.StartEnsemble(t, 3)
	backends := []backend{
		{name: "etcd", endpoints: etcdProcs.Endpoints(), flag: "--etcd"},
		{name: "zookeeper", endpoints: zk.Addrs(), flag: "--zookeeper"},
	}
	Binary(t)
	sf, _ := generator.Preset("snowflake")
	run := func(t *testing.T, i int, sc scenario, b backend) {
		row := &Row{Scenario: sc.name, Backend: b.name, order: i}
		e := &env{t: t, b: b, cluster: fmt.Sprintf("chaos-%d-%s-%d", i, b.name, time.Now().UnixNano()%1e6),
			rec: &Recorder{}, proxies: map[*Node][]*Proxy{}, row: row, layout: sf, etcd: etcdProcs, zk: zk}
		start := time.Now()
		defer func() {
			row.Seconds = time.Since(start).Seconds()
			row.Verdict = "pass"
			if t.Failed() {
				row.Verdict = "FAIL"
			}
			t.Logf("scenario %s/%s: %.1fs", sc.name, b.name, row.Seconds)
			reportMu.Lock()
			report = append(report, *row)
			reportMu.Unlock()
		}()
		sc.run(e)
		if !e.checked {
			t.Error("the scenario never ran the checker (e.check): its IDs are unchecked")
		}
	}
	// each calls f for every scenario and backend this run includes.
	each := func(f func(i int, sc scenario, b backend)) {
		for i, sc := range scenarios {
			for _, b := range backends {
				if sc.zkOnly {
					if b.name != "zookeeper" {
						continue
					}
				} else if !sc.both && b.name != "etcd" {
					continue
				}
				f(i, sc, b)
			}
		}
	}
	// The scenarios that fault a coordinator or load their nodes hard run
	// alone, one after another; then the beside scenarios, a few at once.
	each(func(i int, sc scenario, b backend) {
		if !sc.beside {
			t.Run(sc.name+"/"+b.name, func(t *testing.T) { run(t, i, sc, b) })
		}
	})
	// (Not t.Parallel: -parallel defaults to the number of cores, and
	// these wait far more than they compute.)
	t.Run("beside", func(t *testing.T) {
		sem := make(chan struct{}, besideParallel)
		var wg sync.WaitGroup
		each(func(i int, sc scenario, b backend) {
			if sc.beside {
				sem <- struct{}{}
				wg.Go(func() {
					defer func() { <-sem }()
					t.Run(sc.name+"/"+b.name, func(t *testing.T) { run(t, i, sc, b) })
				})
			}
		})
		wg.Wait()
	})
	// A run of some scenarios (-run) is not the suite's report, nor its
	// time.
	want := 0
	each(func(int, scenario, backend) { want++ })
	reportMu.Lock()
	partial := len(report) < want
	reportMu.Unlock()
	writeReport(t, partial)
	el := time.Since(suiteStart)
	over := ""
	if el > chaosBudget {
		over = " — OVER BUDGET"
	}
	line := fmt.Sprintf("chaos suite: %v of its %v budget%s", el.Round(time.Second), chaosBudget, over)
	t.Log(line)
	// test/run.sh prints it (a passing package's log is not shown).
	if out, err := runCmd("go", "env", "GOMOD"); err == nil && os.Getenv("FIRN_CHAOS_TAGS") == "" && !partial {
		os.WriteFile(filepath.Join(filepath.Dir(strings.TrimSpace(out)), "test", "artifacts", "chaos-time.txt"), []byte(line+"\n"), 0o644)
	}
}

func writeReport(t *testing.T, partial bool) {
	reportMu.Lock()
	defer reportMu.Unlock()
	slices.SortStableFunc(report, func(a, b Row) int { return a.order - b.order })
	var b strings.Builder
	fmt.Fprintf(&b, "\n| scenario | backend | IDs checked | calls failed (expected / unexpected) | time to fail closed | time to recover | verdict | seconds |\n|---|---|---|---|---|---|---|---|\n")
	for _, r := range report {
		fmt.Fprintf(&b, "| %s | %s | %d | %d / %d | %s | %s | %s | %.1f |\n", r.Scenario, r.Backend, r.IDs,
			r.FailedExpected, r.FailedUnexpected, dash(r.FailClosed), dash(r.Recover), r.Verdict, r.Seconds)
	}
	t.Log(b.String())
	if os.Getenv("FIRN_CHAOS_TAGS") != "" || partial {
		return // a weakened build's run, or some scenarios only: not the suite's report
	}
	if out, err := runCmd("go", "env", "GOMOD"); err == nil {
		dir := filepath.Join(filepath.Dir(strings.TrimSpace(out)), "test", "artifacts")
		os.MkdirAll(dir, 0o755)
		js, _ := json.MarshalIndent(report, "", "  ")
		os.WriteFile(filepath.Join(dir, "chaos.json"), js, 0o644)
		os.WriteFile(filepath.Join(dir, "chaos.md"), []byte(b.String()), 0o644)
	}
}

func dash(s string) string {
	if s == "" {
		return "—"
	}
	return s
}

// countFailures classifies failures: expected ones satisfy ok.
// countFailures counts the failures the scenario expects (ok) and fails
// the scenario on the others, and on any refusal a node sent without its
// cause (Failure.causeless), expected or not: every refusal says why.
func countFailures(e *env, fs []Failure, ok func(Failure) bool) {
	causeless := 0
	for _, f := range fs {
		if f.causeless() {
			if causeless++; causeless <= 5 {
				e.t.Errorf("a refusal without a cause on %s at %s: %s: %s", f.Node, f.At.Format("15:04:05.000"), f.Code, f.Msg)
			}
		}
		if ok(f) {
			e.row.FailedExpected++
		} else {
			e.row.FailedUnexpected++
			if e.row.FailedUnexpected <= 5 {
				e.t.Errorf("unexpected failure on %s at %s: %s: %s", f.Node, f.At.Format("15:04:05.000"), f.Code, f.Msg)
			}
		}
	}
}

func none(Failure) bool { return false }

// fault is a window in which a scenario expects calls to fail, and how:
// calls to node ("" for any node) failing from the fault's start until
// the node was seen ready again plus one call deadline (a call sent just
// before may still end in it), each naming one of causes (ErrorInfo
// reasons, docs/reliability.md and docs/clock-policy.md) — or, where the fault
// cuts the node off (killed, frozen, stopped), failing without a cause:
// in transport or at the caller's deadline. A failure outside every
// window, or with another cause, is unexpected.
type fault struct {
	node     string
	from, to time.Time
	causes   []clockguard.Code
	cutOff   bool
}

// The causes a scenario's faults may be refused with: a node starting
// (on restart it also waits for the clock to pass its last reservation,
// and for the restore guard); a node that lost its lease; a node cut off
// from its coordinator, whose reservation runs out.
var (
	restarting      = []clockguard.Code{clockguard.CodeStarting}
	leaseLost       = []clockguard.Code{clockguard.CodeLeaseLost, clockguard.CodeReservationExhausted, clockguard.CodeCoordinatorUnavailable, clockguard.CodeStarting}
	coordinatorLost = []clockguard.Code{clockguard.CodeCoordinatorUnavailable, clockguard.CodeReservationExhausted, clockguard.CodeLeaseLost, clockguard.CodeStarting}
)

// callDeadline is the loads' per-call deadline: how long after a node is
// seen ready a call sent before may still fail.
const callDeadline = 2 * time.Second

// until returns x ending at the moment the node was seen ready again (now
// for a node that never was), plus one call deadline.
func (x fault) until(readyAt time.Time) fault {
	x.to = readyAt.Add(callDeadline)
	return x
}

func (x fault) allows(f Failure) bool {
	if x.node != "" && f.Node != x.node {
		return false
	}
	if f.At.Before(x.from) || (!x.to.IsZero() && f.At.After(x.to)) {
		return false
	}
	if f.Reason == "" {
		return x.cutOff
	}
	return slices.Contains(x.causes, clockguard.Code(f.Reason))
}

// within returns the rule that a failure is expected when some fault's
// window and causes allow it.
func within(faults ...fault) func(Failure) bool {
	return func(f Failure) bool {
		for _, x := range faults {
			if x.allows(f) {
				return true
			}
		}
		return false
	}
}

// waitFor polls cond every 20 ms for up to d.
func waitFor(d time.Duration, cond func() bool) (time.Duration, bool) {
	start := time.Now()
	for time.Since(start) < d {
		if cond() {
			return time.Since(start), true
		}
		time.Sleep(20 * time.Millisecond)
	}
	return time.Since(start), cond()
}

// scenarios are every scenario, in the order they run and the report
// lists them.
var scenarios = slices.Concat(faultScenarios, clockScenarios, startScenarios, clientScenarios,
	coordinatorScenarios, forwardStepScenarios, zombieScenarios, segmentScenarios, seqScenarios)

// faultScenarios: faults of the nodes and of the network between them and
// the coordinator — backward clock steps, kill -9 and restart, SIGSTOP past
// the lease, partitions, lost replies — and of capacity: worker IDs
// exhausted, floods of batches, a drain under load.
var faultScenarios = []scenario{
	{name: "clock steps back 5ms 50ms 500ms absorbed", run: func(e *env) {
		n := e.newNode("n1")
		e.startAll(n)
		load := StartLoad(e.rec, e.nodes, LoadOptions{Callers: 4, Deadline: 2 * time.Second})
		load2 := StartLoad(e.rec, e.nodes, LoadOptions{Callers: 2, Batch: 100, Deadline: 2 * time.Second})
		for _, step := range []time.Duration{5 * time.Millisecond, 50 * time.Millisecond, 500 * time.Millisecond} {
			time.Sleep(700 * time.Millisecond)
			if err := n.SetOffset(-step); err != nil {
				e.t.Fatal(err)
			}
			time.Sleep(1200 * time.Millisecond)
			n.SetOffset(0)
		}
		time.Sleep(500 * time.Millisecond)
		load.Stop()
		load2.Stop()
		countFailures(e, e.rec.Failures(), none)
		e.check(Bounds{Skew: 500 * time.Millisecond})
	}},
	{name: "clock steps back 2s fails closed and recovers", beside: true, run: func(e *env) {
		n1, n2, n3 := e.newNode("n1"), e.newNode("n2"), e.newNode("n3")
		e.startAll(n1, n2, n3)
		load := StartLoad(e.rec, e.nodes, LoadOptions{Callers: 2, Deadline: 2 * time.Second})
		time.Sleep(500 * time.Millisecond)
		stepAt := time.Now()
		if err := n1.SetOffset(-2 * time.Second); err != nil {
			e.t.Fatal(err)
		}
		d, body, err := n1.WaitNotReady(3 * time.Second)
		if err != nil {
			e.t.Fatal(err)
		}
		e.row.FailClosed = d.Round(time.Millisecond).String()
		if !strings.Contains(body, "rolled back") || !strings.Contains(body, "limit") {
			e.t.Errorf("/readyz body does not name the step and the limit: %s", body)
		}
		if st, err := n1.Health(""); err != nil || st != healthpb.HealthCheckResponse_NOT_SERVING {
			e.t.Errorf("health = %v, %v; want NOT_SERVING", st, err)
		}
		n1.SetOffset(0)
		r, err := n1.WaitReady(5 * time.Second)
		if err != nil {
			e.t.Fatal(err)
		}
		e.row.Recover = r.Round(time.Millisecond).String()
		rollback := fault{node: "n1", from: stepAt, causes: []clockguard.Code{clockguard.CodeClockRollback}}.until(time.Now())
		time.Sleep(500 * time.Millisecond)
		load.Stop()
		countFailures(e, e.rec.Failures(), within(rollback))
		if e.row.FailedExpected == 0 {
			e.t.Error("no call failed closed with the rollback reason")
		}
		// It fails closed on the step (beyond max-lead): no ID carries the
		// stepped clock.
		e.check(Bounds{})
	}},
	{name: "kill -9 and restart loop under load", both: true, run: func(e *env) {
		n1, n2 := e.newNode("n1"), e.newNode("n2")
		e.startAll(n1, n2)
		load := StartLoad(e.rec, e.nodes, LoadOptions{Callers: 3, Deadline: 2 * time.Second})
		load2 := StartLoad(e.rec, e.nodes, LoadOptions{Callers: 1, Batch: 100, Deadline: 2 * time.Second})
		var worst time.Duration
		var kills []fault
		for i := 0; i < 4; i++ {
			time.Sleep(600 * time.Millisecond)
			killed := time.Now()
			n1.Kill()
			n1.Start()
			d, err := n1.WaitReady(10 * time.Second)
			if err != nil {
				e.t.Fatal(err)
			}
			worst = max(worst, d)
			kills = append(kills, fault{node: "n1", from: killed, cutOff: true, causes: restarting}.until(time.Now()))
		}
		time.Sleep(500 * time.Millisecond)
		load.Stop()
		load2.Stop()
		e.row.Recover = "≤ " + worst.Round(time.Millisecond).String()
		countFailures(e, e.rec.Failures(), within(kills...))
		e.check(Bounds{})
	}},
	{name: "SIGSTOP past the lease TTL", beside: true, both: true, run: func(e *env) {
		n1 := e.newNode("n1", e.ttlFlags()...)
		n2 := e.newNode("n2", e.ttlFlags()...)
		e.startAll(n1, n2)
		load := StartLoad(e.rec, e.nodes, LoadOptions{Callers: 3, Deadline: 2 * time.Second})
		time.Sleep(500 * time.Millisecond)
		frozen := time.Now()
		n1.Freeze()
		time.Sleep(e.ttl() + 2*time.Second)
		n1.Thaw()
		thawed := time.Now()
		d, err := n1.WaitReady(15 * time.Second)
		if err != nil {
			e.t.Fatal(err)
		}
		e.row.Recover = d.Round(time.Millisecond).String()
		stopped := fault{node: "n1", from: frozen, cutOff: true, causes: leaseLost}.until(time.Now())
		time.Sleep(500 * time.Millisecond)
		load.Stop()
		countFailures(e, e.rec.Failures(), within(stopped))
		// The freeze stops the ring's freshness tick with the node: IDs
		// made before it may be taken just after the thaw, before the
		// filler drops them.
		e.check(Bounds{Skew: thawed.Sub(frozen)})
	}},
	{name: "partition 2s absorbed", beside: true, both: true, run: func(e *env) {
		n1 := e.newNode("n1")
		e.startAll(n1)
		load := StartLoad(e.rec, e.nodes, LoadOptions{Callers: 3, Deadline: 2 * time.Second})
		time.Sleep(1500 * time.Millisecond)
		e.partition(n1, Blackhole)
		time.Sleep(2 * time.Second)
		e.partition(n1, Pass)
		time.Sleep(1500 * time.Millisecond)
		load.Stop()
		countFailures(e, e.rec.Failures(), none)
		e.check(Bounds{})
	}},
	{name: "partition beyond the TTL fails closed and recovers", beside: true, both: true, run: func(e *env) {
		n1 := e.newNode("n1", e.ttlFlags()...)
		e.startAll(n1)
		load := StartLoad(e.rec, e.nodes, LoadOptions{Callers: 3, Deadline: 2 * time.Second})
		time.Sleep(1500 * time.Millisecond)
		cut := time.Now()
		e.partition(n1, Blackhole)
		d, _, err := n1.WaitNotReady(12 * time.Second)
		if err != nil {
			e.t.Fatal(err)
		}
		e.row.FailClosed = d.Round(time.Millisecond).String()
		time.Sleep(time.Second)
		e.partition(n1, Pass)
		for _, p := range e.proxies[n1] {
			p.Sever()
		}
		r, err := n1.WaitReady(15 * time.Second)
		if err != nil {
			e.t.Fatal(err)
		}
		e.row.Recover = r.Round(time.Millisecond).String()
		load.Stop()
		// The node stays reachable: every refusal names the cause.
		countFailures(e, e.rec.Failures(), within(fault{node: "n1", from: cut, causes: coordinatorLost}.until(time.Now())))
		e.check(Bounds{})
	}},
	{name: "lost replies: written but not acknowledged", beside: true, both: true, run: func(e *env) {
		n1 := e.newNode("n1")
		e.startAll(n1)
		load := StartLoad(e.rec, e.nodes, LoadOptions{Callers: 3, Deadline: 2 * time.Second})
		time.Sleep(time.Second)
		dropped := time.Now()
		e.partition(n1, DropReplies)
		time.Sleep(1500 * time.Millisecond)
		e.partition(n1, Pass)
		for _, p := range e.proxies[n1] {
			p.Sever()
		}
		if _, err := n1.WaitReady(15 * time.Second); err != nil {
			e.t.Fatal(err)
		}
		lost := fault{node: "n1", from: dropped, causes: coordinatorLost}.until(time.Now())
		time.Sleep(time.Second)
		load.Stop()
		countFailures(e, e.rec.Failures(), within(lost))
		e.check(Bounds{})
	}},
	{name: "worker IDs exhausted: 2 worker bits, 5 nodes", beside: true, run: func(e *env) {
		layout := "x=time=41,dc=0,worker=2,seq=12,unit=1ms,epoch=2024-01-01T00:00:00Z"
		l, _ := generator.ParseLayout(strings.TrimPrefix(layout, "x="))
		e.layout = l
		var ns []*Node
		for i := 1; i <= 5; i++ {
			ns = append(ns, e.newNode(fmt.Sprintf("n%d", i), "--generator", layout))
		}
		e.startAll(ns[:4]...)
		ns[4].Start()
		_, body, err := ns[4].WaitNotReady(10 * time.Second)
		if err != nil {
			e.t.Fatal(err)
		}
		if _, ok := waitFor(5*time.Second, func() bool { _, b := ns[4].Ready(); body = b; return strings.Contains(b, "exhausted") }); !ok {
			e.t.Errorf("the fifth node does not report exhaustion: %s", body)
		}
		load := StartLoad(e.rec, ns[:4], LoadOptions{Callers: 1, Generator: "x", Deadline: 2 * time.Second})
		time.Sleep(500 * time.Millisecond)
		// n1 stops for good: from then on its callers fail, refused as it
		// drains, then in transport.
		gone := fault{node: "n1", from: time.Now(), cutOff: true, causes: []clockguard.Code{clockguard.CodeDraining}}
		ns[0].Stop(10 * time.Second)
		// The freed worker is taken at n5's next try, then the restore
		// guard is waited (guardWait): the bound is that, with room for a
		// loaded 2-core machine.
		d, err := ns[4].WaitReady(guardWait + 8*time.Second)
		if err != nil {
			e.t.Fatal(err)
		}
		e.row.Recover = d.Round(time.Millisecond).String()
		load.Stop()
		load = StartLoad(e.rec, ns[1:], LoadOptions{Callers: 1, Generator: "x", Deadline: 2 * time.Second})
		time.Sleep(time.Second)
		load.Stop()
		countFailures(e, e.rec.Failures(), within(gone))
		e.check(Bounds{})
	}},
	{name: "overload: a flood of maximum batches beside small callers", both: true, run: func(e *env) {
		// --max-queue 50ms holds about two of the flood's batches: the
		// rest is refused at once, and the small callers (their own
		// connections) are served between the batches' turns.
		n1 := e.newNode("n1", "--max-queue", "50ms")
		e.startAll(n1)
		small := &Recorder{}
		small.clients.Store(1000) // caller numbers apart from the flood's
		smallLoad := StartLoad(small, e.nodes, LoadOptions{Callers: 2, Deadline: 2 * time.Second})
		flood := StartLoad(e.rec, e.nodes, LoadOptions{Callers: 8, Batch: 100_000, Deadline: 2 * time.Second})
		time.Sleep(2 * time.Second)
		flood.Stop()
		smallLoad.Stop()
		shed := 0
		countFailures(e, e.rec.Failures(), func(f Failure) bool {
			ok := f.Code == codes.ResourceExhausted && f.Reason == "OVERLOADED" && strings.Contains(f.Msg, "overloaded")
			if ok {
				shed++
			}
			return ok
		})
		if shed == 0 {
			e.t.Errorf("the flood was never refused: admission did not bound the queue")
		}
		countFailures(e, small.Failures(), none)
		if len(small.IDs()) == 0 {
			e.t.Errorf("the small callers got no ID during the flood")
		}
		if _, err := n1.WaitReady(time.Second); err != nil {
			e.t.Errorf("not serving right after the flood: %v", err)
		}
		for _, r := range small.IDs() {
			e.rec.addRun(r.Node, r.Generator, r.Run, r.Client, r.Call, []uint64{r.ID}, r.Sent, r.At)
		}
		e.check(Bounds{})
	}},
	{name: "wide: four workers, one lease released under load", both: true, run: func(e *env) {
		// A node holding four workers beside a node holding one, under
		// unary, batch and range load; one of the four leases is freed
		// by an operator (fenced): the wide node keeps serving from the
		// other three, takes a fourth again, and no ID is issued twice.
		wide, other := e.newNode("n1", "--workers", "4"), e.newNode("n2")
		e.startAll(wide, other)
		held := func() []uint32 {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			info, err := wide.ID.Info(ctx, &firnv1.InfoRequest{})
			if err != nil || len(info.GetGenerators()) == 0 {
				return nil
			}
			return info.GetGenerators()[0].GetWorkers()
		}
		if _, ok := waitFor(10*time.Second, func() bool { return len(held()) == 4 }); !ok {
			e.t.Fatalf("the wide node holds workers %v, want 4", held())
		}
		load := StartLoad(e.rec, e.nodes, LoadOptions{Callers: 2, Deadline: 2 * time.Second})
		batches := StartLoad(e.rec, e.nodes, LoadOptions{Callers: 1, Batch: 200, Deadline: 2 * time.Second, Pause: 5 * time.Millisecond})
		ranges := StartLoad(e.rec, []*Node{wide}, LoadOptions{Callers: 2, Range: 1000, Deadline: 2 * time.Second, Pause: 10 * time.Millisecond})
		time.Sleep(time.Second)
		ws := held()
		victim := ws[len(ws)/2]
		l := e.layout
		out, err := runCmd(Binary(e.t), "workers", "release", fmt.Sprint(victim&uint32(l.WorkerLimit()-1)),
			"--datacenter", fmt.Sprint(victim>>l.WorkerBits), e.b.flag, strings.Join(e.b.endpoints, ","), "--cluster", e.cluster)
		if err != nil {
			e.t.Fatalf("firn workers release: %v: %s", err, out)
		}
		// The freed worker's holder closes (its next write is fenced)
		// while the node stays ready; then it holds four again.
		victimClosed := func() bool {
			for _, h := range wide.Intervals() {
				if uint32(h.Datacenter<<l.WorkerBits|h.Worker) == victim && h.Highest != 0 {
					return true
				}
			}
			return false
		}
		// The holder's new take waits the restore guard.
		d, ok := waitFor(guardWait+4*time.Second, func() bool {
			if code, body := wide.Ready(); code != 200 {
				e.t.Errorf("the wide node stopped serving after one of four leases was released: %d %s", code, body)
			}
			return victimClosed() && len(held()) == 4
		})
		if !ok {
			e.t.Errorf("after worker %d was released: its holder closed %v, workers %v; want closed and four again", victim, victimClosed(), held())
		}
		e.row.Recover = d.Round(time.Millisecond).String()
		time.Sleep(500 * time.Millisecond)
		ranges.Stop()
		batches.Stop()
		load.Stop()
		countFailures(e, e.rec.Failures(), none)
		e.check(Bounds{})
	}},
	{name: "graceful shutdown under load", beside: true, run: func(e *env) {
		n1, n2 := e.newNode("n1"), e.newNode("n2")
		e.startAll(n1, n2)
		load := StartLoad(e.rec, e.nodes, LoadOptions{Callers: 3, Deadline: 2 * time.Second})
		time.Sleep(time.Second)
		stopAt := time.Now()
		if code := n1.Stop(20 * time.Second); code != 0 {
			e.t.Errorf("SIGTERM exit code %d, want 0", code)
		}
		// Its release lowered the reservation: the new process waits for
		// nothing but the restore guard every take on a shared
		// coordinator waits.
		n1.Start()
		d, err := n1.WaitReady(guardWait + 3*time.Second)
		if err != nil {
			e.t.Fatal(err)
		}
		e.row.Recover = d.Round(time.Millisecond).String()
		// After the drain began, new calls to n1 are refused, then fail
		// in transport while it is down, then wait for its start.
		restart := fault{node: "n1", from: stopAt, cutOff: true, causes: append([]clockguard.Code{clockguard.CodeDraining}, restarting...)}.until(time.Now())
		time.Sleep(time.Second)
		load.Stop()
		countFailures(e, e.rec.Failures(), within(restart))
		e.check(Bounds{})
	}},
}

func runCmd(name string, args ...string) (string, error) {
	out, err := osexec.Command(name, args...).Output()
	return string(out), err
}
