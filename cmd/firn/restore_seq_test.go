package main

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/status"

	firnv1 "github.com/firnid/firn/client/firnv1"
	"github.com/firnid/firn/internal/seqcheck"
)

// TestRestoreSeqEtcdSnapshot and TestRestoreSeqZooKeeperDataDir: a node
// serving a sequence generator under load on 40 keys; the coordinator's
// state copied; the keys advanced further; the coordinator restored from
// the copy, and at once a second node with an empty data dir started and
// loaded — the sections it takes hold, in the copy, maxima below values
// node 1 handed out since. Node 1's read of the record finds its own
// writes missing and writes the restore marker: no value of a key is
// handed out twice or out of order (seqcheck), both nodes refuse naming
// the restore and the bump, and after `firn coordinator bump --ids N`
// both serve again, without a restart, every key above every value of
// the run.
func TestRestoreSeqEtcdSnapshot(t *testing.T) {
	t.Parallel() // its own etcd, ports and dirs
	runSeqRestoreStory(t, etcdSnapshotStory(t))
}

func TestRestoreSeqZooKeeperDataDir(t *testing.T) {
	t.Parallel() // its own ZooKeeper, ports and dirs
	runSeqRestoreStory(t, zkDataDirStory(t))
}

// seqLoadCount is the count of each of seqLoad's calls: large enough that
// the keys outrun the sections' write-ahead step within a second, so that
// the copy misses writes (a restore that loses none is no restore).
const seqLoadCount = 200

// seqLoad calls NextSeq on keys k0…k39, each call to a node that owns the
// key's section as far as the caller knows (following WRONG_NODE), every
// answer recorded for the checker.
type seqLoad struct {
	t     *testing.T
	rec   *seqcheck.Recorder
	t0    time.Time
	mu    sync.Mutex
	procs []*proc
	n     int // calls answered
	done  chan struct{}
	ended chan struct{}
}

func startSeqLoad(t *testing.T, rec *seqcheck.Recorder, t0 time.Time, ps ...*proc) *seqLoad {
	l := &seqLoad{t: t, rec: rec, t0: t0, procs: ps, done: make(chan struct{}), ended: make(chan struct{})}
	go func() {
		defer close(l.ended)
		for i := 0; ; i++ {
			select {
			case <-l.done:
				return
			default:
			}
			key := fmt.Sprintf("k%d", i%40)
			l.mu.Lock()
			ps := l.procs
			l.mu.Unlock()
			for _, p := range ps {
				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				s := time.Since(l.t0)
				resp, err := p.client().NextSeq(ctx, &firnv1.NextSeqRequest{Generator: "chats", Key: []byte(key), Count: seqLoadCount})
				end := time.Since(l.t0)
				cancel()
				if err == nil {
					l.rec.Add(seqcheck.Call{Key: key, First: resp.First, Count: seqLoadCount, Start: s, End: end, Who: p.a.grpc})
					l.mu.Lock()
					l.n++
					l.mu.Unlock()
					break
				}
				if !wrongNode(err) {
					break
				}
			}
			time.Sleep(2 * time.Millisecond)
		}
	}()
	return l
}

func (l *seqLoad) add(p *proc) {
	l.mu.Lock()
	l.procs = append(append([]*proc(nil), l.procs...), p)
	l.mu.Unlock()
}

func (l *seqLoad) answered() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.n
}

func (l *seqLoad) stop() {
	close(l.done)
	<-l.ended
}

// wrongNode reports whether err is a WRONG_NODE refusal.
func wrongNode(err error) bool {
	st, _ := status.FromError(err)
	for _, d := range st.Details() {
		if ei, ok := d.(*errdetails.ErrorInfo); ok && ei.Reason == "WRONG_NODE" {
			return true
		}
	}
	return false
}

func runSeqRestoreStory(t *testing.T, st restoreStory) {
	began := time.Now()
	args := append([]string{"--generator", "chats=seq,sections=8", "--lease-ttl", restoreTTL.String()}, st.coord...)
	var rec seqcheck.Recorder
	n1 := serve(t, t.TempDir(), freeAddrs(t), nil, args...)
	n1.waitReady(30 * time.Second)
	l := startSeqLoad(t, &rec, began, n1)
	time.Sleep(2 * time.Second)
	st.snapshot()
	n1.started = time.Now()
	n1.waitReady(15 * time.Second) // the ZooKeeper copy stopped the server for a moment
	before := l.answered()
	time.Sleep(3 * time.Second) // raises the copy does not hold
	if l.answered() == before {
		t.Fatal("no values served after the copy was taken")
	}

	restoreAt := time.Now()
	st.restore()
	// At once, a node that knows nothing: the sections it takes start at
	// the copy's maxima, below what node 1 handed out since.
	n2 := serve(t, t.TempDir(), freeAddrs(t), nil, args...)
	l.add(n2)

	noticed := waitRestored(t, n1, 20*time.Second, st.describe)
	t.Logf("node 1 refused naming the restore %v after the coordinator came back", noticed.Sub(restoreAt).Round(time.Millisecond))
	n2.started = time.Now()
	waitRestored(t, n2, 20*time.Second, st.describe)
	for end := time.Now().Add(3 * time.Second); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		for i, p := range []*proc{n1, n2} {
			if code, body := readyz(p.a); !namesRestore(code, body) {
				t.Fatalf("node %d /readyz stopped naming the restore before the bump: %d %s", i+1, code, body)
			}
		}
	}
	l.stop()
	if v := seqcheck.Check(rec.Calls(), 10); len(v) > 0 {
		t.Fatalf("before the bump, %d calls: per-key rule broken: %v", rec.Len(), v)
	}
	t.Logf("before the bump: %d calls, none out of order", rec.Len())

	out, errOut, code := cli(t, nil, append([]string{"coordinator", "bump", "--generator", "chats", "--ids", "1000000"}, st.coord...)...)
	if code != 0 || !strings.Contains(out, "cleared the restore marker") {
		t.Fatalf("firn coordinator bump --ids: exit %d, stderr %q:\n%s", code, errOut, out)
	}
	t.Logf("bump:\n%s", out)
	for i, p := range []*proc{n1, n2} {
		p.started = time.Now()
		d := p.waitReady(20 * time.Second)
		t.Logf("node %d served again %v after the bump", i+1, d.Round(time.Millisecond))
	}
	l = startSeqLoad(t, &rec, began, n1, n2)
	time.Sleep(2 * time.Second)
	l.stop()
	if v := seqcheck.Check(rec.Calls(), 10); len(v) > 0 {
		t.Fatalf("%d calls: per-key rule broken: %v", rec.Len(), v)
	}
	for i, p := range []*proc{n1, n2} {
		if code := p.signal(syscall.SIGTERM, 20*time.Second); code != 0 {
			t.Fatalf("node %d: exit code %d after SIGTERM", i+1, code)
		}
	}
	t.Logf("story took %v, %d calls", time.Since(began).Round(time.Millisecond), rec.Len())
}
