package main

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/firnid/firn/generator"
	"github.com/firnid/firn/internal/testing/etcdtest"
	"github.com/firnid/firn/internal/testing/zktest"
)

// TestRestoreFreshNodeFirst: a coordinator is restored from a copy taken
// before node 1 started, while node 1 still holds a reservation the copy
// does not know; a fresh node 2 (empty data dir), already started and
// waiting for the coordinator, reaches the restored coordinator first and
// takes node 1's worker 0 (free in the copy). No ID may be returned twice,
// whether node 1 is cut off from the coordinator and keeps serving on its
// last acknowledged reservation ("partition": every connection through its
// proxy hangs, none is refused) or is stopped (SIGSTOP) across the restore
// and resumed once node 2 served a few seconds and node 1's reservation
// ran out ("sigstop"), or resumed right after the restore, while its
// reservation still stands ("sigstop-early").
//
// Both nodes' IDs are kept and checked: no ID twice, and on a worker both
// served on, their time ranges do not meet (where they do, only the
// milliseconds both happened to touch repeat, so the duplicate count is
// luck; the overlap is not). Node 2 must serve (not promptly: a take after
// a restore may wait out the window) and must have taken the worker while
// node 1 could still issue on it, or the test fails as not exercised.
//
// On Debian's etcd (one member, `etcdctl snapshot save` / `snapshot
// restore`) and Debian's ZooKeeper (one standalone server, its data dir
// copied while stopped and put back), as TestRestoreEtcdSnapshot and
// TestRestoreZooKeeperDataDir restore them.
func TestRestoreFreshNodeFirst(t *testing.T) {
	for _, c := range []struct {
		name  string
		start func(t *testing.T) raceCoord
	}{
		{"etcd", startRaceEtcd},
		{"zookeeper", startRaceZooKeeper},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			for _, mode := range []raceMode{racePartition, raceStop, raceStopEarly} {
				t.Run(mode.String(), func(t *testing.T) {
					// Each run has its own coordinator and nodes, and
					// waits far more than it computes.
					t.Parallel()
					began := time.Now()
					runFreshNodeFirst(t, c.start(t), mode)
					t.Logf("took %v", time.Since(began).Round(time.Millisecond))
				})
			}
		})
	}
}

// raceCoord is one coordinator under test, started and with the copy the
// restore goes back to already taken.
type raceCoord struct {
	flag     string        // --etcd or --zookeeper
	addr     string        // the coordinator's address, as a node names it
	target   string        // the same as host:port, for the proxy
	kill     func()        // SIGKILL the coordinator
	restore  func()        // put the copy back, start it, wait until it serves
	describe func() string // the coordinator's log tail, for a failure
}

func startRaceEtcd(t *testing.T) raceCoord {
	procs := etcdtest.StartCluster(t, 1)
	m := procs.Members[0]
	snap := filepath.Join(t.TempDir(), "snapshot.db")
	m.SaveSnapshot(t, snap)
	return raceCoord{
		flag:     "--etcd",
		addr:     m.ClientURL,
		target:   strings.TrimPrefix(m.ClientURL, "http://"),
		kill:     m.Kill,
		restore:  func() { procs.RestoreSnapshot(t, m, snap) }, // the member is already killed
		describe: func() string { b, _ := os.ReadFile(m.LogPath); return tail(string(b), 30) },
	}
}

func startRaceZooKeeper(t *testing.T) raceCoord {
	s := zktest.StartStandalone(t)
	put := zkDataCopy(t, s)
	return raceCoord{
		flag:     "--zookeeper",
		addr:     s.Addr,
		target:   s.Addr,
		kill:     s.Kill,
		restore:  put, // the server is already killed
		describe: func() string { return s.LogTail(30) },
	}
}

// The nodes' timing: restoreLayout (two worker IDs: node 2 takes node 1's
// worker 0, free in the copy) with a lease TTL and window of 8 s each (the
// reproduction ran the defaults, 5 s). Not restoreNodeArgs' 2 s TTL: on
// etcd a node cut off stops serving once its own lease TTL passes
// unrenewed, and with 2 s that leaves node 2 (the restore takes 1–2 s) a
// few hundred milliseconds to take node 1's worker while node 1 still
// serves. The nodes serve until their reservation runs out on either
// backend; node 2 must take the worker before that. With 5 s, a loaded
// machine missed it: ZooKeeper's restore (a JVM started) took 4 s and
// node 2's take another second, 15 ms after node 1's reservation ended.
const (
	raceWindow = 8 * time.Second
	raceTTL    = 8 * time.Second
)

// raceNodeArgs are the race's node flags. Two nodes on one machine without
// NTP: --unchecked-clock-ok (their clocks
// are the same clock, well within the skew bound the guard assumes).
func raceNodeArgs(coord ...string) []string {
	return append([]string{"--generator", "default=" + restoreLayout, "--unchecked-clock-ok",
		"--reservation-window", raceWindow.String(), "--lease-ttl", raceTTL.String()}, coord...)
}

// How long node 1's load runs before the fault, how long both loads run
// after it at least (node 1's last reservation, one window past the fault
// at most, is used up well within it), how long node 2 serves before
// node 1 is resumed (sigstop) and how long node 1's load runs after that.
const (
	raceLoadBefore = 3 * time.Second
	raceAfterFault = 15 * time.Second
	raceN2Serves   = 3 * time.Second
	raceAfterCont  = 4 * time.Second
	raceN2Ready    = 30 * time.Second // after the restored coordinator is up
)

// raceMode is how node 1 is kept from noticing the restore.
type raceMode int

const (
	racePartition raceMode = iota // its connections hang
	raceStop                      // SIGSTOP, resumed after its reservation ran out
	raceStopEarly                 // SIGSTOP, resumed right after the restore
)

func (m raceMode) String() string { return [...]string{"partition", "sigstop", "sigstop-early"}[m] }

func runFreshNodeFirst(t *testing.T, c raceCoord, mode raceMode) {
	stop := mode != racePartition
	sf, err := generator.ParseLayout(restoreLayout)
	if err != nil {
		t.Fatal(err)
	}

	// Node 1 reaches the coordinator through the proxy; it logs every
	// acknowledged reservation (debug), so the test knows its last.
	px := newHangProxy(t, c.target)
	n1 := serve(t, t.TempDir(), freeAddrs(t), nil, raceNodeArgs(c.flag, px.addr(), "--log-level", "debug")...)
	n1.waitReady(30 * time.Second)
	l1 := startLoad(t, n1)
	time.Sleep(raceLoadBefore)
	before := l1.count()
	if before == 0 {
		t.Fatalf("node 1 returned no IDs in %v of load before the fault (%d failed calls)", raceLoadBefore, l1.failures())
	}

	// The fault comes right after node 1's reservation was renewed, so
	// that it holds nearly a whole window past the fault: the time the
	// restore and node 2's take have to land in.
	resEnd := waitRenewal(t, n1, 3*time.Second)

	// The fault, then the coordinator killed; node 2 starts while it is
	// down, then the copy is put back.
	faultAt := time.Now()
	if stop {
		if err := syscall.Kill(n1.cmd.Process.Pid, syscall.SIGSTOP); err != nil {
			t.Fatalf("SIGSTOP node 1: %v", err)
		}
	} else {
		px.block()
	}
	c.kill()
	n2 := serve(t, t.TempDir(), freeAddrs(t), nil, raceNodeArgs(c.flag, c.addr)...)
	c.restore()
	restoredAt := time.Now()
	t.Logf("node 1 returned %d IDs before the fault, its reservation runs to fault+%v; coordinator restored %v after the fault",
		before, resEnd.Sub(faultAt).Round(time.Millisecond), restoredAt.Sub(faultAt).Round(time.Millisecond))
	if n2.exited() {
		t.Fatalf("node 2 exited while the coordinator was down (%v): %s", n2.cmd.ProcessState, lastLine(n2.stderr.String()))
	}

	var resumedAt time.Time
	resume := func() {
		l1.mark()
		resumedAt = time.Now()
		if err := syscall.Kill(n1.cmd.Process.Pid, syscall.SIGCONT); err != nil {
			t.Fatalf("SIGCONT node 1: %v", err)
		}
		t.Logf("node 1 resumed %v after the fault", resumedAt.Sub(faultAt).Round(time.Millisecond))
	}
	if mode == raceStopEarly {
		// Node 2 is already waiting for the coordinator: give it a moment
		// to take the worker, then wake node 1 inside its reservation.
		sleepUntil(restoredAt.Add(300 * time.Millisecond))
		if !time.Now().Before(resEnd) {
			t.Fatalf("the race was not exercised: the restore ended after node 1's reservation (fault+%v)", resEnd.Sub(faultAt).Round(time.Millisecond))
		}
		resume()
	}

	// Node 2 must serve: otherwise nothing below would be tested.
	n2ready := false
	t.Cleanup(func() {
		if !n2ready && t.Failed() {
			t.Logf("coordinator log tail:\n%s", c.describe())
		}
	})
	n2start := n2.started
	n2.started = restoredAt
	ready := n2.waitReady(raceN2Ready)
	n2ready = true
	t.Logf("node 2 ready %v after the restore (%v after the fault, %v after its start)", ready.Round(time.Millisecond),
		time.Since(faultAt).Round(time.Millisecond), time.Since(n2start).Round(time.Millisecond))
	l2 := startLoad(t, n2)
	servesFrom := time.Now()

	switch mode {
	case raceStop:
		// Resumed once node 2 served a while and node 1's reservation
		// (as it stood at the fault) has run out.
		sleepUntil(latest(servesFrom.Add(raceN2Serves), resEnd.Add(time.Second)))
		if l2.count() == 0 {
			t.Fatalf("node 2 returned no IDs in %v after it was ready (%d failed calls)", raceN2Serves, l2.failures())
		}
		resume()
		sleepUntil(latest(resumedAt.Add(raceAfterCont), faultAt.Add(raceAfterFault)))
	case raceStopEarly:
		sleepUntil(latest(servesFrom.Add(raceN2Serves), resumedAt.Add(raceAfterCont), faultAt.Add(raceAfterFault)))
	default:
		sleepUntil(latest(servesFrom.Add(raceN2Serves), faultAt.Add(raceAfterFault)))
	}
	var afterResume int
	if stop {
		afterResume = l1.countSinceMark()
	}
	ids1, ids2 := l1.stop(), l2.stop()
	l1failed, l2failed := l1.failures(), l2.failures()
	t.Logf("node 1: %d IDs (%d after the fault), %d failed calls; node 2: %d IDs, %d failed calls; loads ended %v after the fault",
		len(ids1), len(ids1)-before, l1failed, len(ids2), l2failed, time.Since(faultAt).Round(time.Millisecond))
	if stop {
		t.Logf("node 1 after SIGCONT: %d IDs", afterResume)
	}

	// What each node served, per worker: the time range, against the fault.
	type span struct {
		n        int
		lo, hi   generator.Parts
		afterCut int // IDs with a time after the fault
	}
	spans := func(ids []uint64) map[uint64]*span {
		m := map[uint64]*span{}
		for _, id := range ids {
			p, err := sf.Decode(id)
			if err != nil {
				t.Fatalf("ID %d: %v", id, err)
			}
			s := m[p.Worker]
			if s == nil {
				s = &span{lo: p, hi: p}
				m[p.Worker] = s
			}
			s.n++
			if p.Units < s.lo.Units {
				s.lo = p
			}
			if p.Units > s.hi.Units {
				s.hi = p
			}
			if p.Time.After(faultAt) {
				s.afterCut++
			}
		}
		return m
	}
	rel := func(p generator.Parts) string {
		d := p.Time.Sub(faultAt).Round(time.Millisecond)
		if d < 0 {
			return fmt.Sprintf("fault%v", d)
		}
		return fmt.Sprintf("fault+%v", d)
	}
	s1, s2 := spans(ids1), spans(ids2)
	shared := 0
	var overlaps []string
	for w := range sf.WorkerLimit() {
		a, b := s1[w], s2[w]
		if a != nil {
			t.Logf("worker %d node 1: %d IDs, times %s .. %s (%d stamped after the fault)", w, a.n, rel(a.lo), rel(a.hi), a.afterCut)
		}
		if b != nil {
			t.Logf("worker %d node 2: %d IDs, times %s .. %s", w, b.n, rel(b.lo), rel(b.hi))
		}
		if a == nil || b == nil {
			continue
		}
		shared++
		t.Logf("worker %d: node 2's lowest time is %v after node 1's highest (negative: the time ranges overlap)",
			w, b.lo.Time.Sub(a.hi.Time).Round(time.Millisecond))
		// One holder after the other: their time ranges on the worker must
		// not meet (docs/design.md, "Why duplicates cannot happen", 2).
		// Where they do, each millisecond both touched repeats IDs; how
		// many they touched in the overlap shows how close it came.
		lo, hi := max(a.lo.Units, b.lo.Units), min(a.hi.Units, b.hi.Units)
		if lo > hi {
			continue
		}
		touched := func(ids []uint64) map[int64]bool {
			m := map[int64]bool{}
			for _, id := range ids {
				if p, _ := sf.Decode(id); p.Worker == w && p.Units >= lo && p.Units <= hi {
					m[p.Units] = true
				}
			}
			return m
		}
		m1, m2 := touched(ids1), touched(ids2)
		both := 0
		for u := range m1 {
			if m2[u] {
				both++
			}
		}
		overlaps = append(overlaps, fmt.Sprintf("worker %d: node 1 served times %s .. %s, node 2 %s .. %s: an overlap of %v "+
			"in which node 1 touched %d milliseconds, node 2 %d, both %d",
			w, rel(a.lo), rel(a.hi), rel(b.lo), rel(b.hi), sf.UnitStart(hi+1).Sub(sf.UnitStart(lo)), len(m1), len(m2), both))
	}
	if len(overlaps) > 0 {
		t.Errorf("both nodes held one worker over the same times (any millisecond both touch repeats IDs):\n%s", strings.Join(overlaps, "\n"))
	}

	// No ID twice: not from one node, not from both.
	slices.Sort(ids1)
	slices.Sort(ids2)
	describe := func(ids []uint64) string {
		var b strings.Builder
		for i, id := range ids {
			p, _ := sf.Decode(id)
			if i > 0 {
				b.WriteString("; ")
			}
			fmt.Fprintf(&b, "%d (worker %d, time %s = %s, seq %d)", id, p.Worker, p.Time.UTC().Format("15:04:05.000"), rel(p), p.Sequence)
		}
		return b.String()
	}
	var bad []string
	for i, ids := range [][]uint64{ids1, ids2} {
		if n, first := repeats(ids); n > 0 {
			bad = append(bad, fmt.Sprintf("node %d returned %d IDs more than once, first: %s", i+1, n, describe(first)))
		}
	}
	if n, first := common(ids1, ids2); n > 0 {
		bad = append(bad, fmt.Sprintf("%d IDs returned by both nodes, first: %s", n, describe(first)))
	}
	if len(bad) > 0 {
		t.Errorf("duplicate IDs:\n%s", strings.Join(bad, "\n"))
	}

	// Not vacuous: node 2 served, on node 1's worker, which it took while
	// node 1 could still issue on it.
	if len(ids2) == 0 {
		t.Fatalf("node 2 returned no IDs (ready %v after the restore, %d failed calls)", ready, l2failed)
	}
	if shared == 0 {
		t.Fatalf("node 2 served on no worker node 1 served on (node 1 %v, node 2 %v): the race was not exercised", keys(s1), keys(s2))
	}
	reserved := map[uint64]holderEvent{} // node 1's last acknowledged reservation per worker
	for _, e := range holderEvents(t, n1) {
		if r, ok := reserved[e.worker]; e.event == "holder_reserve" && (!ok || e.reserved > r.reserved) {
			reserved[e.worker] = e
		}
	}
	var took *holderEvent
	for _, e := range holderEvents(t, n2) {
		if e.event == "holder_open" {
			took = &e
			break
		}
	}
	relT := func(at time.Time) string { return rel(generator.Parts{Time: at}) }
	switch r, ok := reserved[0]; {
	case took == nil:
		t.Fatalf("node 2's log has no holder_open event: cannot tell when it took its worker")
	case !ok:
		t.Fatalf("node 1's log has no holder_reserve event for worker 0 (run with --log-level debug)")
	default:
		end := sf.UnitStart(r.reserved + 1)
		floor := "none"
		if took.floor > 0 {
			floor = relT(sf.UnitStart(took.floor))
		}
		t.Logf("node 1's last acknowledged reservation on worker 0 (at %s): up to %s; node 2 took worker %d at %s (%v after the restore), floor %s",
			relT(r.at), relT(end), took.worker, relT(took.at), took.at.Sub(restoredAt).Round(time.Millisecond), floor)
		if b := s2[took.worker]; b != nil && took.worker == 0 {
			t.Logf("node 2's first ID on worker 0 is %v after the end of node 1's last reservation on it (negative: inside it)",
				b.lo.Time.Sub(end).Round(time.Millisecond))
		}
		// Cut off, node 1 must still have issued after node 2 took the
		// worker; stopped, its reservation must still have stood (it would
		// have served, had it woken then).
		switch a := s1[0]; {
		case took.worker != 0:
			t.Fatalf("the race was not exercised: node 2 took worker %d, not node 1's worker 0", took.worker)
		case a == nil:
			t.Fatalf("the race was not exercised: node 1 served nothing on worker 0")
		case !stop && !took.at.Before(a.hi.Time):
			t.Fatalf("the race was not exercised: node 2 took worker 0 at %s, after node 1's last ID on it (%s)", relT(took.at), rel(a.hi))
		case stop && !took.at.Before(end):
			t.Fatalf("the race was not exercised: node 2 took worker 0 at %s, node 1's reservation on it ran to %s", relT(took.at), relT(end))
		}
	}
}

// waitRenewal waits until the node's default generator acknowledges a
// new reservation and returns its end (Info's reserved_until).
func waitRenewal(t *testing.T, p *proc, within time.Duration) time.Time {
	t.Helper()
	until := func() time.Time {
		for _, g := range p.info().GetGenerators() {
			if g.GetIsDefault() {
				return g.GetReservedUntil().AsTime()
			}
		}
		t.Fatal("no default generator in Info")
		return time.Time{}
	}
	was := until()
	for start := time.Now(); time.Since(start) < within; time.Sleep(5 * time.Millisecond) {
		if now := until(); now.After(was) {
			return now
		}
	}
	t.Fatalf("node 1's reservation (until %v) not renewed within %v", was, within)
	return time.Time{}
}

// holderEvent is a holder_open (an acquisition: its floor) or
// holder_reserve (an acknowledged reservation, logged at debug level) line
// of a node's log.
type holderEvent struct {
	at              time.Time
	event           string
	worker          uint64
	floor, reserved int64
}

func holderEvents(t *testing.T, p *proc) []holderEvent {
	var out []holderEvent
	for _, line := range strings.Split(p.stderr.String(), "\n") {
		var m map[string]any
		d := json.NewDecoder(strings.NewReader(line))
		d.UseNumber()
		if d.Decode(&m) != nil {
			continue
		}
		ev, _ := m["event"].(string)
		if ev != "holder_open" && ev != "holder_reserve" {
			continue
		}
		e := holderEvent{event: ev}
		ts, _ := m["time"].(string)
		var err error
		if e.at, err = time.Parse(time.RFC3339Nano, ts); err != nil {
			t.Fatalf("log line %s: time: %v", line, err)
		}
		num := func(k string) int64 {
			v, _ := m[k].(json.Number)
			x, _ := v.Int64()
			return x
		}
		e.worker, e.floor, e.reserved = uint64(num("worker")), num("floor"), num("reserved")
		out = append(out, e)
	}
	return out
}

func (l *idLoad) failures() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.failed
}

// repeats counts the values of a sorted slice that occur more than once
// and returns the first few.
func repeats(sorted []uint64) (int, []uint64) {
	n := 0
	var first []uint64
	for i := 1; i < len(sorted); i++ {
		if sorted[i] == sorted[i-1] && (i == 1 || sorted[i-1] != sorted[i-2]) {
			n++
			if len(first) < 5 {
				first = append(first, sorted[i])
			}
		}
	}
	return n, first
}

// common counts the distinct values two sorted slices share and returns
// the first few.
func common(a, b []uint64) (int, []uint64) {
	n := 0
	var first []uint64
	for i, j := 0, 0; i < len(a) && j < len(b); {
		switch {
		case a[i] < b[j]:
			i++
		case a[i] > b[j]:
			j++
		default:
			v := a[i]
			n++
			if len(first) < 5 {
				first = append(first, v)
			}
			for i < len(a) && a[i] == v {
				i++
			}
			for j < len(b) && b[j] == v {
				j++
			}
		}
	}
	return n, first
}

func keys[V any](m map[uint64]V) []uint64 {
	var k []uint64
	for w := range m {
		k = append(k, w)
	}
	slices.Sort(k)
	return k
}

func latest(ts ...time.Time) time.Time {
	var l time.Time
	for _, t := range ts {
		if t.After(l) {
			l = t
		}
	}
	return l
}

func sleepUntil(at time.Time) { time.Sleep(time.Until(at)) }

// hangProxy forwards TCP from a loopback port to one target until block;
// from then on every connection, open or new, forwards nothing and is held
// open, never closed (also when the target closes its side): the node
// behind it sees its calls hang, as in a partition that drops packets, not
// refused. It is closed at cleanup.
type hangProxy struct {
	ln      net.Listener
	target  string
	blocked chan struct{}
	closed  chan struct{}
	once    sync.Once
	mu      sync.Mutex
	conns   []net.Conn
	wg      sync.WaitGroup
}

func newHangProxy(t *testing.T, target string) *hangProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("proxy: %v", err)
	}
	p := &hangProxy{ln: ln, target: target, blocked: make(chan struct{}), closed: make(chan struct{})}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.close)
	return p
}

func (p *hangProxy) addr() string { return p.ln.Addr().String() }

// block stops all forwarding for good.
func (p *hangProxy) block() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.blocked:
	default:
		close(p.blocked)
	}
}

func (p *hangProxy) isBlocked() bool {
	select {
	case <-p.blocked:
		return true
	default:
		return false
	}
}

// track keeps c to close at the end; false once the proxy is closed.
func (p *hangProxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.closed:
		return false
	default:
	}
	p.conns = append(p.conns, c)
	return true
}

func (p *hangProxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		if !p.track(c) {
			c.Close()
			return
		}
		if p.isBlocked() {
			continue // accepted, never answered, held open
		}
		u, err := net.DialTimeout("tcp", p.target, time.Second)
		if err != nil {
			if !p.isBlocked() {
				c.Close() // the target is down: refused, as without the proxy
			}
			continue
		}
		if !p.track(u) {
			u.Close()
			return
		}
		p.wg.Add(2)
		go p.pump(u, c)
		go p.pump(c, u)
	}
}

func (p *hangProxy) pump(dst, src net.Conn) {
	defer p.wg.Done()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if p.isBlocked() {
			<-p.closed // forward nothing more, close nothing
			return
		}
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				err = werr
			}
		}
		if err != nil {
			if p.isBlocked() {
				<-p.closed
				return
			}
			dst.Close()
			src.Close()
			return
		}
	}
}

func (p *hangProxy) close() {
	p.once.Do(func() {
		p.mu.Lock()
		close(p.closed)
		conns := p.conns
		p.mu.Unlock()
		p.ln.Close()
		for _, c := range conns {
			c.Close()
		}
		p.wg.Wait()
	})
}
