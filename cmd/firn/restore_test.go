package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/go-zookeeper/zk"

	firnv1 "github.com/firnid/firn/client/firnv1"
	"github.com/firnid/firn/generator"
	"github.com/firnid/firn/internal/testing/etcdtest"
	"github.com/firnid/firn/internal/testing/zktest"
)

// The nodes' timing in these tests: the shortest the node accepts (etcd: 2 × the 1 s call timeout + 1.5 s;
// ZooKeeper: 2/3 of the 2 s session timeout + 1.5 s).
//
// The layout has two worker IDs, so that after the bump the two nodes
// between them hold the worker that served before the restore too.
const (
	restoreWindow = 4 * time.Second
	restoreTTL    = 2 * time.Second
	restoreLayout = "time=41,worker=1,seq=12,unit=1ms,epoch=2020-01-01T00:00:00Z"
)

// The nodes run without NTP, one or two at a time: --unchecked-clock-ok
// (the story is the restore, not the clock check).
func restoreNodeArgs(coord []string) []string {
	return append([]string{"--generator", "default=" + restoreLayout,
		"--reservation-window", restoreWindow.String(), "--lease-ttl", restoreTTL.String(), "--unchecked-clock-ok"}, coord...)
}

// restoreStory is one coordinator under test: how a node and the admin
// command reach it, how the older copy of its state is taken, and how the
// coordinator is put back to that copy.
type restoreStory struct {
	coord    []string      // --etcd EP or --zookeeper ADDR
	snapshot func()        // take the copy the restore goes back to
	restore  func()        // kill the coordinator and restore it from the copy
	describe func() string // the coordinator's log tail, for a failure
	// traffic, where set, is other clients' writes after the copy
	// (ZooKeeper: enough that a node's session has seen a zxid far past
	// the copy's, so that the restored server refuses the node's session
	// until it has expired: a fresh node's few writes do not catch up).
	traffic func()
}

// zkTraffic creates and deletes a node n times through its own client.
func zkTraffic(t *testing.T, s *zktest.Server, n int) {
	t.Helper()
	c := zktest.AdminConn(t, []string{s.Addr}, "")
	defer c.Close()
	for i := 0; i < n; i++ {
		if _, err := c.Create("/firn-test-traffic", nil, 0, zk.WorldACL(zk.PermAll)); err != nil {
			t.Fatalf("traffic create: %v", err)
		}
		if err := c.Delete("/firn-test-traffic", -1); err != nil {
			t.Fatalf("traffic delete: %v", err)
		}
	}
}

// TestRestoreEtcdSnapshot: a node serving on Debian's etcd 3.4 (one
// member); `etcdctl snapshot save`; seconds more of load; the member
// killed and restored from the snapshot into a fresh data dir (a plain
// restore, revision numbers reused). The node refuses, naming the restore
// and the bump, and keeps refusing; a node started afterwards with an
// empty data dir refuses too; a bump below the marker's gap is refused;
// after `firn coordinator bump --by D` both serve again without a restart,
// and no ID of the whole run repeats.
func TestRestoreEtcdSnapshot(t *testing.T) {
	t.Parallel() // its own etcd, ports and dirs: beside the ZooKeeper story
	runRestoreStory(t, etcdSnapshotStory(t))
}

// TestRestoreZooKeeperDataDir: the same story on a standalone Debian
// ZooKeeper server, restored from an older copy of its data directory
// (copied while the server was stopped; the server killed later, its data
// dir replaced by the copy, and started again).
func TestRestoreZooKeeperDataDir(t *testing.T) {
	t.Parallel() // its own ZooKeeper, ports and dirs: beside the etcd story
	runRestoreStory(t, zkDataDirStory(t))
}

// etcdSnapshotStory is a one-member etcd of its own, copied by `etcdctl
// snapshot save` and restored from the snapshot into a fresh data dir.
func etcdSnapshotStory(t *testing.T) restoreStory {
	procs := etcdtest.StartCluster(t, 1)
	m := procs.Members[0]
	snap := filepath.Join(t.TempDir(), "snapshot.db")
	return restoreStory{
		coord:    []string{"--etcd", m.ClientURL},
		snapshot: func() { m.SaveSnapshot(t, snap) },
		restore:  func() { procs.RestoreSnapshot(t, m, snap) },
		describe: func() string { b, _ := os.ReadFile(m.LogPath); return tail(string(b), 30) },
	}
}

// zkDataDirStory is a standalone ZooKeeper server of its own, restored
// from an older copy of its data directory.
func zkDataDirStory(t *testing.T) restoreStory {
	s := zktest.StartStandalone(t)
	var put func()
	return restoreStory{
		coord:    []string{"--zookeeper", s.Addr},
		snapshot: func() { put = zkDataCopy(t, s) },
		restore: func() {
			s.Kill()
			put()
		},
		describe: func() string { return s.LogTail(30) },
		traffic:  func() { zkTraffic(t, s, 250) },
	}
}

// zkDataCopy copies the data dir of the standalone server s, stopped for
// the copy and started again, and returns what puts the copy back: it
// replaces the data dir of the server (killed by then) with the copy and
// starts it.
func zkDataCopy(t *testing.T, s *zktest.Server) (put func()) {
	t.Helper()
	old := filepath.Join(t.TempDir(), "zk-data-copy")
	copyDir := func(from, to string) {
		t.Helper()
		if out, err := exec.Command("cp", "-a", from, to).CombinedOutput(); err != nil {
			t.Fatalf("cp -a %s %s: %v %s", from, to, err, out)
		}
	}
	s.Kill()
	copyDir(s.DataDir(), old)
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	return func() {
		if err := os.RemoveAll(s.DataDir()); err != nil {
			t.Fatal(err)
		}
		copyDir(old, s.DataDir())
		if err := s.Start(); err != nil {
			t.Fatal(err)
		}
	}
}

func runRestoreStory(t *testing.T, st restoreStory) {
	began := time.Now()
	sf, err := generator.ParseLayout(restoreLayout)
	if err != nil {
		t.Fatal(err)
	}
	var before []uint64 // every ID served before the restore was noticed

	a1 := freeAddrs(t)
	n1 := serve(t, t.TempDir(), a1, nil, restoreNodeArgs(st.coord)...)
	n1.waitReady(30 * time.Second)

	// Load, then the copy the restore will go back to.
	l := startLoad(t, n1)
	time.Sleep(2 * time.Second)
	snapAt := time.Now()
	st.snapshot()
	n1.started = time.Now()
	n1.waitReady(15 * time.Second) // the ZooKeeper copy stopped the server for a moment

	// Seconds of load the copy does not cover.
	time.Sleep(2500 * time.Millisecond)
	uncovered := l.count()
	if uncovered == 0 {
		t.Fatal("no IDs served before the copy was taken")
	}
	l.mark()
	time.Sleep(2500 * time.Millisecond)
	if l.countSinceMark() == 0 {
		t.Fatal("no IDs served after the copy was taken")
	}

	// The restore.
	restoreAt := time.Now()
	st.restore()
	t.Logf("restored %v after the copy (coordinator back %v after the kill)", time.Since(snapAt).Round(time.Millisecond),
		time.Since(restoreAt).Round(time.Millisecond))

	// Node 1 notices and refuses, naming the restore and the bump.
	noticed := waitRestored(t, n1, 20*time.Second, st.describe)
	t.Logf("node 1 refused naming the restore %v after the coordinator came back", noticed.Sub(restoreAt).Round(time.Millisecond))
	before = append(before, l.stop()...)
	t.Logf("before the restore: %d IDs (%d of them after the copy), %d failed calls", len(before), len(before)-uncovered, l.failed)

	// Node 2, an empty data dir, started while the marker stands. Both
	// refuse, over several seconds, and serve nothing.
	a2 := freeAddrs(t)
	n2 := serve(t, t.TempDir(), a2, nil, restoreNodeArgs(st.coord)...)
	keepRefusing(t, []*proc{n1, n2}, 5*time.Second)

	// firn workers shows the marker, with the least D that covers it (a
	// bump that leaves the floor below what node 1 acknowledged is
	// refused: TestBumpReadsLayoutFromPin, and coordtest per backend).
	out, errOut, code := cli(t, nil, append([]string{"workers"}, st.coord...)...)
	if code != 0 || !strings.Contains(out, "RESTORE MARKER") || !strings.Contains(out, "firn coordinator bump --generator default --by D") {
		t.Fatalf("firn workers under a restore marker: exit %d, stderr %q:\n%s", code, errOut, out)
	}
	keepRefusing(t, []*proc{n1, n2}, 1500*time.Millisecond)

	// The bump: D covers the time since the copy plus the window.
	by := (time.Since(snapAt) + restoreWindow + time.Second).Round(time.Second)
	bumpAt := time.Now()
	out, errOut, code = cli(t, nil, append([]string{"coordinator", "bump", "--by", by.String()}, st.coord...)...)
	if code != 0 {
		t.Fatalf("firn coordinator bump --by %v: exit %d, stderr %q", by, code, errOut)
	}
	t.Logf("bump --by %v:\n%s", by, out)
	if !regexp.MustCompile(`nodes serve again from about \S+, in \d`).MatchString(out) || !strings.Contains(out, "cleared the restore marker") {
		t.Fatalf("bump output does not say when nodes serve again and that it cleared the marker:\n%s", out)
	}

	// Both serve again, without a restart, within about D + the window.
	within := by + restoreWindow + 5*time.Second
	for i, p := range []*proc{n1, n2} {
		p.started = bumpAt
		d := p.waitReady(within)
		t.Logf("node %d served again %v after the bump (D %v)", i+1, d.Round(time.Millisecond), by)
	}

	var after []uint64
	workers := map[string]uint64{}
	for i, p := range []*proc{n1, n2} {
		for k := 0; k < 5; k++ {
			got := nextIDs(t, p, 1000)
			after = append(after, got...)
		}
		pt, _ := sf.Decode(after[len(after)-1])
		workers[fmt.Sprintf("node %d", i+1)] = pt.Worker
	}
	t.Logf("after the bump: %d IDs; workers %v", len(after), workers)

	// No ID twice over the whole run.
	all := append(slices.Clone(before), after...)
	slices.Sort(all)
	for i := 1; i < len(all); i++ {
		if all[i] == all[i-1] {
			p, _ := sf.Decode(all[i])
			t.Fatalf("ID %d issued twice (dc %d worker %d time %v)", all[i], p.Datacenter, p.Worker, p.Time)
		}
	}
	// Every worker's IDs after the bump lie above its IDs from before (and
	// the check is not empty: with two worker IDs one of the nodes holds a
	// worker that served before the restore); every ID after the bump
	// carries a time above every ID from before (the bump's floor).
	type slot struct{ dc, w uint64 }
	top := map[slot]uint64{}
	var latest generator.Parts
	for _, id := range before {
		p, err := sf.Decode(id)
		if err != nil {
			t.Fatal(err)
		}
		s := slot{p.Datacenter, p.Worker}
		top[s] = max(top[s], id)
		if p.Units > latest.Units {
			latest = p
		}
	}
	reused := 0
	for _, id := range after {
		p, err := sf.Decode(id)
		if err != nil {
			t.Fatal(err)
		}
		hi, ok := top[slot{p.Datacenter, p.Worker}]
		if ok {
			reused++
		}
		if ok && id <= hi {
			q, _ := sf.Decode(hi)
			t.Fatalf("after the bump dc %d worker %d issued %d (time %v), not above its %d (time %v) from before the restore",
				p.Datacenter, p.Worker, id, p.Time, hi, q.Time)
		}
		if p.Units <= latest.Units {
			t.Fatalf("after the bump worker %d issued %d with time %v, not above the latest time before the restore %v (worker %d)",
				p.Worker, id, p.Time, latest.Time, latest.Worker)
		}
	}
	if reused == 0 {
		t.Fatalf("after the bump no node holds a worker that served before the restore (workers %v; before: %v)", workers, top)
	}

	for i, p := range []*proc{n1, n2} {
		if code := p.signal(syscall.SIGTERM, 20*time.Second); code != 0 {
			t.Fatalf("node %d: exit code %d after SIGTERM", i+1, code)
		}
	}
	t.Logf("story took %v", time.Since(began).Round(time.Millisecond))
}

// idLoad calls NextIDs(200) on one node in a loop and keeps every ID served.
type idLoad struct {
	t      *testing.T
	mu     sync.Mutex
	ids    []uint64
	marked int
	failed int
	done   chan struct{}
	ended  chan struct{}
}

func startLoad(t *testing.T, p *proc) *idLoad {
	l := &idLoad{t: t, done: make(chan struct{}), ended: make(chan struct{})}
	c := p.client()
	go func() {
		defer close(l.ended)
		for {
			select {
			case <-l.done:
				return
			default:
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			resp, err := c.NextIDs(ctx, &firnv1.NextIDsRequest{Count: 200})
			cancel()
			l.mu.Lock()
			if err != nil {
				l.failed++
			} else {
				l.ids = append(l.ids, resp.GetIds()...)
			}
			l.mu.Unlock()
			time.Sleep(10 * time.Millisecond)
		}
	}()
	t.Cleanup(func() {
		select {
		case <-l.done:
		default:
			close(l.done)
		}
		<-l.ended
	})
	return l
}

func (l *idLoad) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.ids)
}

func (l *idLoad) mark() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.marked = len(l.ids)
}

func (l *idLoad) countSinceMark() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.ids) - l.marked
}

// stop ends the load and returns every ID it was served.
func (l *idLoad) stop() []uint64 {
	close(l.done)
	<-l.ended
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.ids)
}

// readyz returns /readyz's status and body (0 and the error when the node
// does not answer).
func readyz(a addrs) (int, string) {
	c := &http.Client{Timeout: time.Second}
	resp, err := c.Get("http://" + a.http + "/readyz")
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// namesRestore: a 503 naming the restore and the command that clears it.
func namesRestore(code int, body string) bool {
	return code == 503 && strings.Contains(body, "coordinator state restored") && strings.Contains(body, "firn coordinator bump")
}

// waitRestored waits until the node's /readyz is 503 naming the restore and
// returns when that was first seen.
func waitRestored(t *testing.T, p *proc, within time.Duration, describe func() string) time.Time {
	t.Helper()
	start := time.Now()
	var code int
	var body string
	for time.Since(start) < within {
		if p.exited() {
			t.Fatalf("node exited (%v): %s", p.cmd.ProcessState, lastLine(p.stderr.String()))
		}
		code, body = readyz(p.a)
		if namesRestore(code, body) {
			return time.Now()
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("node not refusing for the restore within %v of the coordinator's return: last /readyz %d %s\ncoordinator log:\n%s",
		within, code, body, describe())
	return time.Time{}
}

// keepRefusing checks each node for d: /readyz is never 200 and, from its
// first answer naming the restore (within the first 4 s for a node just
// started), always 503 naming it; NextIDs calls, about one a second, are
// refused UNAVAILABLE naming the restore, at once.
func keepRefusing(t *testing.T, ps []*proc, d time.Duration) {
	t.Helper()
	named := make([]bool, len(ps))
	refused := make([]int, len(ps))
	var lastCall time.Time
	start := time.Now()
	for time.Since(start) < d {
		for i, p := range ps {
			if p.exited() {
				t.Fatalf("node %d exited (%v): %s", i+1, p.cmd.ProcessState, lastLine(p.stderr.String()))
			}
			code, body := readyz(p.a)
			switch {
			case code == 200:
				t.Fatalf("node %d /readyz 200 %v into the check (restore marker standing, no bump yet): %s",
					i+1, time.Since(start).Round(time.Millisecond), body)
			case namesRestore(code, body):
				named[i] = true
			case named[i]:
				t.Fatalf("node %d /readyz stopped naming the restore %v into the check: %d %s",
					i+1, time.Since(start).Round(time.Millisecond), code, body)
			case time.Since(p.started) > 4*time.Second:
				t.Fatalf("node %d /readyz does not name the restore %v after its start: %d %s",
					i+1, time.Since(p.started).Round(time.Millisecond), code, body)
			}
		}
		if time.Since(lastCall) > time.Second {
			lastCall = time.Now()
			for i, p := range ps {
				if !named[i] {
					continue
				}
				// A node that waited instead of refusing at once would run
				// the call to its deadline: DEADLINE_EXCEEDED, not the
				// refusal required below.
				ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
				resp, err := p.client().NextIDs(ctx, &firnv1.NextIDsRequest{Count: 10})
				cancel()
				if err == nil {
					t.Fatalf("node %d served %d IDs (%v) while the restore marker stands", i+1, len(resp.GetIds()), resp.GetIds())
				}
				s, _ := status.FromError(err)
				if strings.Contains(s.Message(), "connection error") {
					continue // the test's connection, not the node's answer: ask again next round
				}
				refused[i]++
				if s.Code() != codes.Unavailable || !strings.Contains(s.Message(), "restored") {
					t.Fatalf("node %d refused NextIDs with %v; want UNAVAILABLE naming the restore", i+1, err)
				}
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	for i := range ps {
		if !named[i] {
			code, body := readyz(ps[i].a)
			t.Fatalf("node %d never named the restore in %v: /readyz %d %s", i+1, d, code, body)
		}
		if refused[i] == 0 {
			t.Fatalf("node %d answered no NextIDs call in %v", i+1, d)
		}
	}
}

// nextIDs asks the node for k IDs over gRPC.
func nextIDs(t *testing.T, p *proc, k int) []uint64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := p.client().NextIDs(ctx, &firnv1.NextIDsRequest{Count: uint32(k)})
	if err != nil {
		t.Fatalf("NextIDs(%d) from %s: %v", k, p.a.grpc, err)
	}
	if len(resp.GetIds()) != k {
		t.Fatalf("NextIDs(%d) returned %d IDs", k, len(resp.GetIds()))
	}
	return resp.GetIds()
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
