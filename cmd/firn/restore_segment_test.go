package main

import (
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestRestoreSegmentEtcdSnapshot and TestRestoreSegmentZooKeeperDataDir:
// a node serving a segment generator under load; the coordinator's state
// copied; more claims; the coordinator restored from the copy, and at
// once a second node with an empty data dir started and loaded — it would
// claim IDs the first node claimed after the copy. The first node's read
// of the counter finds its own write missing and writes the restore
// marker: the fresh node hands out nothing the first one did, both refuse
// naming the restore and the bump, and after `firn coordinator bump --ids
// N` both serve again, without a restart, above every ID of the run, none
// repeated. Here node 1 notices (about a second after the coordinator is
// back) before node 2 has started and claimed; the race the other way —
// the fresh node's claim landing first, stopped only by its settle — is
// segment/source's TestRestoreFoundByPoll (which also shows that without
// the settle the fresh node hands out node 1's IDs) and the simulator's.
func TestRestoreSegmentEtcdSnapshot(t *testing.T) {
	t.Parallel() // its own etcd, ports and dirs
	runSegmentRestoreStory(t, etcdSnapshotStory(t), restoreTTL)
}

// On ZooKeeper other clients write after the copy and the nodes' session
// timeout (--lease-ttl) is 10 s: the restored server refuses node 1's
// session (it has seen a later zxid) until it has expired, which would
// leave node 1 unable to read the counter for that long, while the fresh
// node's claims settle in 2 s. Node 1 reads through a fresh session
// instead (coordinator/zookeeper's probe); without it this story fails
// with node 1's IDs issued again by node 2.
func TestRestoreSegmentZooKeeperDataDir(t *testing.T) {
	t.Parallel() // its own ZooKeeper, ports and dirs
	runSegmentRestoreStory(t, zkDataDirStory(t), 10*time.Second)
}

func runSegmentRestoreStory(t *testing.T, st restoreStory, ttl time.Duration) {
	began := time.Now()
	// The reservation window must cover 2/3 of the session timeout and more.
	args := append([]string{"--generator", "orders=segment", "--lease-ttl", ttl.String(),
		"--reservation-window", max(5*time.Second, ttl).String()}, st.coord...)
	n1 := serve(t, t.TempDir(), freeAddrs(t), nil, args...)
	n1.waitReady(30 * time.Second)
	l1 := startLoad(t, n1) // NextIDs(200) every 10 ms: claims every couple of seconds
	time.Sleep(2 * time.Second)
	st.snapshot()
	n1.started = time.Now()
	n1.waitReady(15 * time.Second) // the ZooKeeper copy stopped the server for a moment
	if st.traffic != nil {
		st.traffic()
	}
	l1.mark()
	time.Sleep(3 * time.Second) // claims the copy does not hold
	if l1.countSinceMark() == 0 {
		t.Fatal("no IDs served after the copy was taken")
	}

	restoreAt := time.Now()
	st.restore()
	// At once, a node that knows nothing: its claims start where the copy
	// left the counter, below what node 1 claimed since.
	n2 := serve(t, t.TempDir(), freeAddrs(t), nil, args...)
	l2 := startLoad(t, n2)

	noticed := waitRestored(t, n1, 20*time.Second, st.describe)
	t.Logf("node 1 refused naming the restore %v after the coordinator came back", noticed.Sub(restoreAt).Round(time.Millisecond))
	n2.started = time.Now()
	waitRestored(t, n2, 20*time.Second, st.describe)
	keepRefusing(t, []*proc{n1, n2}, 3*time.Second)
	ids1, ids2 := l1.stop(), l2.stop()
	before := append(slices.Clone(ids1), ids2...)
	slices.Sort(before)
	if n, some := repeats(before); n > 0 {
		t.Fatalf("%d IDs issued twice before the bump (node 1: %d IDs, the fresh node 2: %d): %v", n, len(ids1), len(ids2), some)
	}
	t.Logf("before the bump: node 1 %d IDs, fresh node 2 %d IDs (%d failed calls), none repeated", len(ids1), len(ids2), l2.failed)

	out, errOut, code := cli(t, nil, append([]string{"workers", "--generator", "orders"}, st.coord...)...)
	if code != 0 || !strings.Contains(out, "RESTORE MARKER") || !strings.Contains(out, "firn coordinator bump --generator orders --ids N") {
		t.Fatalf("firn workers under a segment generator's restore marker: exit %d, stderr %q:\n%s", code, errOut, out)
	}
	out, errOut, code = cli(t, nil, append([]string{"coordinator", "bump", "--generator", "orders", "--ids", "10000000"}, st.coord...)...)
	if code != 0 || !strings.Contains(out, "cleared the restore marker") {
		t.Fatalf("firn coordinator bump --ids: exit %d, stderr %q:\n%s", code, errOut, out)
	}
	t.Logf("bump:\n%s", out)
	var after []uint64
	for i, p := range []*proc{n1, n2} {
		p.started = time.Now()
		d := p.waitReady(20 * time.Second)
		t.Logf("node %d served again %v after the bump", i+1, d.Round(time.Millisecond))
		after = append(after, nextIDs(t, p, 1000)...)
	}
	for _, id := range after {
		if id <= before[len(before)-1] {
			t.Fatalf("after the bump ID %d, not above the %d issued before", id, before[len(before)-1])
		}
	}
	all := append(before, after...)
	slices.Sort(all)
	if n, some := repeats(all); n > 0 {
		t.Fatalf("%d IDs issued twice: %v", n, some)
	}
	for i, p := range []*proc{n1, n2} {
		if code := p.signal(syscall.SIGTERM, 20*time.Second); code != 0 {
			t.Fatalf("node %d: exit code %d after SIGTERM", i+1, code)
		}
	}
	t.Logf("story took %v", time.Since(began).Round(time.Millisecond))
}
