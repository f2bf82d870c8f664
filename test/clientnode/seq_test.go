package clientnode

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/firnid/firn/client"
	firnv1 "github.com/firnid/firn/client/firnv1"
	"github.com/firnid/firn/internal/seqcheck"
	"github.com/firnid/firn/seq"
)

// seqCluster is three nodes serving chats=seq (64 sections) and a
// snowflake default on the first node's embedded etcd.
type seqCluster struct {
	bin    string
	nodes  []*node
	origin time.Time
}

func startSeqCluster(t *testing.T) *seqCluster {
	t.Helper()
	bin := buildFirn(t)
	gens := []string{"--generator", "default=snowflake", "--generator", "chats=seq"}
	a := startNode(t, bin, append([]string{"--embedded-client-addr", "127.0.0.1:" + freePort(t),
		"--embedded-peer-addr", "127.0.0.1:" + freePort(t)}, gens...)...)
	_, _, etcdURL := a.slot(t)
	if etcdURL == "" {
		t.Fatal("the first node shows no embedded etcd URL in Info")
	}
	b := startNode(t, bin, append([]string{"--etcd", etcdURL}, gens...)...)
	c := startNode(t, bin, append([]string{"--etcd", etcdURL}, gens...)...)
	sc := &seqCluster{bin: bin, nodes: []*node{a, b, c}, origin: time.Now()}
	sc.waitStable(t, sc.nodes)
	return sc
}

// owners is node n's section map of chats: section → owner address, and
// whether every section has an owner and n serves each of its own.
func owners(t *testing.T, n *node) ([]string, bool) {
	t.Helper()
	for _, g := range n.info(t).GetGenerators() {
		if g.GetName() != "chats" {
			continue
		}
		if g.GetKind() != "seq" || g.GetSections() != seq.DefaultSections {
			t.Fatalf("node %s: chats is kind %q with %d sections", n.addr, g.GetKind(), g.GetSections())
		}
		out := make([]string, g.GetSections())
		ok := len(g.GetSectionOwners()) == len(out)
		for _, o := range g.GetSectionOwners() {
			out[o.GetSection()] = o.GetAddress()
			ok = ok && o.GetAddress() != "" && o.GetServing()
		}
		return out, ok
	}
	t.Fatalf("node %s runs no chats generator", n.addr)
	return nil, false
}

// waitStable waits until the nodes agree on a section map in which every
// section is served and each of them owns some.
func (sc *seqCluster) waitStable(t *testing.T, nodes []*node) []string {
	t.Helper()
	var m []string
	waitFor(t, 30*time.Second, "the nodes to agree on a served section map", func() bool {
		var first []string
		for _, n := range nodes {
			o, ok := owners(t, n)
			if !ok || (first != nil && strings.Join(o, ",") != strings.Join(first, ",")) {
				return false
			}
			first = o
		}
		for _, n := range nodes {
			found := false
			for _, a := range first {
				found = found || a == n.addr
			}
			if !found {
				return false
			}
		}
		m = first
		return true
	})
	return m
}

func (sc *seqCluster) now() time.Duration { return time.Since(sc.origin) }

// ownerOf is the owner of key's section in m.
func ownerOf(m []string, key []byte) string {
	return m[seq.Definition{Sections: len(m)}.Section(seq.Hash(key))]
}

// drawSeq has callers goroutines call NextSeq on keys (each call with its
// own deadline) until stop closes, recording every call; each caller
// checks that its own values of a key increase. It returns the calls'
// errors.
func drawSeq(t *testing.T, sc *seqCluster, c *client.Client, rec *seqcheck.Recorder, keys [][]byte, callers int, deadline time.Duration, stop <-chan struct{}) []error {
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	for w := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			last := map[string]uint64{}
			for i := w; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				key := keys[(i*7+w)%len(keys)]
				n := 1 + i%3
				ctx, cancel := context.WithTimeout(context.Background(), deadline)
				start := sc.now()
				first, err := c.NextSeq(ctx, key, n)
				end := sc.now()
				cancel()
				if err != nil {
					mu.Lock()
					errs = append(errs, fmt.Errorf("caller %d, key %q after %v: %w", w, key, end-start, err))
					mu.Unlock()
					continue
				}
				if prev, ok := last[string(key)]; ok && first <= prev {
					mu.Lock()
					errs = append(errs, fmt.Errorf("caller %d, key %q: %d after %d", w, key, first, prev))
					mu.Unlock()
				}
				last[string(key)] = first + uint64(n) - 1
				rec.Add(seqcheck.Call{Key: string(key), First: first, Count: uint64(n), Start: start, End: end, Who: fmt.Sprintf("caller %d", w)})
			}
		}()
	}
	wg.Wait()
	return errs
}

func checkSeqCalls(t *testing.T, rec *seqcheck.Recorder) {
	t.Helper()
	if v := seqcheck.Check(rec.Calls(), 10); len(v) > 0 {
		for _, x := range v {
			t.Error(x)
		}
		t.Fatalf("%d calls: the per-key order is broken", rec.Len())
	}
}

// TestSeqClient: the Go client against three real nodes serving a
// sequence generator, configured with one of them only. It learns the
// section map and sends each key to its owner, so in steady state no call
// is refused WRONG_NODE; every key's values increase per caller and in
// real time; NextSeqs spreads 100 keys over the owners and answers in
// order; bad input is refused naming the bound; and with one node
// stopped gracefully mid-run the calls go on within their deadlines
// while its sections move.
func TestSeqClient(t *testing.T) {
	sc := startSeqCluster(t)
	a, b, c := sc.nodes[0], sc.nodes[1], sc.nodes[2]
	m, _ := owners(t, a)

	cl := newClient(t, []string{a.addr}, client.WithGenerator("chats"))
	keys := make([][]byte, 200)
	perOwner := map[string]int{}
	for i := range keys {
		keys[i] = []byte(fmt.Sprintf("chat-%d", i))
		perOwner[ownerOf(m, keys[i])]++
	}
	if len(perOwner) != 3 {
		t.Fatalf("200 keys over owners %v; want all three", perOwner)
	}
	var rec seqcheck.Recorder

	t.Run("steady", func(t *testing.T) {
		// Warm up: the first call loads the map.
		if _, err := cl.NextSeq(ctxFor(t, 5*time.Second), keys[0], 1); err != nil {
			t.Fatal(err)
		}
		s0 := cl.Stats()
		if s0.SeqMapRefreshes == 0 || s0.SeqRedirects != 0 {
			t.Fatalf("after the first call: %+v; want the map read and no redirect", s0)
		}
		stop := make(chan struct{})
		time.AfterFunc(2*time.Second, func() { close(stop) })
		errs := drawSeq(t, sc, cl, &rec, keys, 8, 5*time.Second, stop)
		for _, err := range errs {
			t.Error(err)
		}
		s := cl.Stats()
		if s.SeqRedirects != 0 {
			t.Fatalf("steady state: %d redirects over %d calls; want none (routing by the map)", s.SeqRedirects, s.SeqCalls)
		}
		if s.SeqCalls < 100 {
			t.Fatalf("only %d calls in 2 s", s.SeqCalls)
		}
		checkSeqCalls(t, &rec)
		// CurrentSeq: at or above every value handed out for the key.
		top := map[string]uint64{}
		for _, x := range rec.Calls() {
			top[x.Key] = max(top[x.Key], x.Last())
		}
		for _, k := range keys[:20] {
			v, err := cl.CurrentSeq(ctxFor(t, 5*time.Second), k)
			if err != nil {
				t.Fatal(err)
			}
			if v < top[string(k)] {
				t.Fatalf("CurrentSeq(%s) = %d, below %d handed out", k, v, top[string(k)])
			}
		}
		t.Logf("%d calls, stats %+v", rec.Len(), cl.Stats())
	})

	t.Run("NextSeqs", func(t *testing.T) {
		items := make([]client.SeqItem, 100)
		spread := map[string]int{}
		for i := range items {
			items[i] = client.SeqItem{Key: []byte(fmt.Sprintf("batch-%d", i)), Count: 1 + i%4}
			spread[ownerOf(m, items[i].Key)]++
		}
		if len(spread) != 3 {
			t.Fatalf("100 keys over %v", spread)
		}
		before := cl.Stats()
		var prev []client.SeqResult
		for round := range 2 {
			start := sc.now()
			res, err := cl.NextSeqs(ctxFor(t, 5*time.Second), items)
			end := sc.now()
			if err != nil {
				t.Fatal(err)
			}
			if len(res) != len(items) {
				t.Fatalf("%d results for %d items", len(res), len(items))
			}
			for i, r := range res {
				if r.Err != nil || r.Count != items[i].Count {
					t.Fatalf("round %d, item %d (%s): %+v", round, i, items[i].Key, r)
				}
				if prev != nil && r.First <= prev[i].First+uint64(prev[i].Count)-1 {
					t.Fatalf("item %d (%s): %d after %+v of the call before", i, items[i].Key, r.First, prev[i])
				}
				rec.Add(seqcheck.Call{Key: string(items[i].Key), First: r.First, Count: uint64(r.Count), Start: start, End: end, Who: "NextSeqs"})
			}
			prev = res
		}
		if s := cl.Stats(); s.SeqRedirects != before.SeqRedirects {
			t.Fatalf("NextSeqs was redirected %d times: items not sent to their owners", s.SeqRedirects-before.SeqRedirects)
		}
		// A bad item is refused alone.
		res, err := cl.NextSeqs(ctxFor(t, 5*time.Second), []client.SeqItem{{Key: []byte("ok"), Count: 1}, {Key: nil, Count: 1}})
		if err != nil || res[0].Err != nil || !errors.Is(res[1].Err, client.ErrInvalidKey) {
			t.Fatalf("one bad item: %v %+v", err, res)
		}
		checkSeqCalls(t, &rec)
	})

	t.Run("bad input", func(t *testing.T) {
		ctx := ctxFor(t, 5*time.Second)
		for _, tc := range []struct {
			key   []byte
			count int
			bound string
		}{
			{nil, 1, "1 to 256 bytes"},
			{make([]byte, 257), 1, "1 to 256 bytes"},
			{[]byte("k"), 10001, "[1, 10000]"},
		} {
			if _, err := cl.NextSeq(ctx, tc.key, tc.count); err == nil || !strings.Contains(err.Error(), tc.bound) {
				t.Errorf("client: NextSeq(%d-byte key, count %d): %v; want a refusal naming %q", len(tc.key), tc.count, err, tc.bound)
			}
		}
		// The node refuses them too, naming the field and the bound.
		conn, err := grpc.NewClient(b.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		ids := firnv1.NewIDServiceClient(conn)
		for _, tc := range []struct {
			key          []byte
			count        uint32
			field, limit string
		}{
			{nil, 1, "key", "1..256 bytes"},
			{make([]byte, 257), 1, "key", "1..256 bytes"},
			{[]byte("k"), 10001, "count", "1..10000"},
		} {
			_, err := ids.NextSeq(ctx, &firnv1.NextSeqRequest{Generator: "chats", Key: tc.key, Count: tc.count})
			info := errorInfo(err)
			if status.Code(err) != codes.InvalidArgument || client.Reason(err) != firnv1.ErrorReason_BAD_REQUEST ||
				info.GetMetadata()["field"] != tc.field || info.GetMetadata()["limit"] != tc.limit {
				t.Errorf("node: NextSeq(%d-byte key, count %d): %v %v; want INVALID_ARGUMENT naming %s %s", len(tc.key), tc.count, err, info.GetMetadata(), tc.field, tc.limit)
			}
		}
		// A generator of another kind, and one that does not exist.
		other := newClient(t, []string{a.addr}, client.WithGenerator("default"))
		_, err = other.NextSeq(ctx, []byte("k"), 1)
		if status.Code(err) != codes.InvalidArgument || client.Reason(err) != firnv1.ErrorReason_BAD_REQUEST || !strings.Contains(err.Error(), "sequence generator") {
			t.Errorf("NextSeq on a snowflake generator: %v", err)
		}
		if _, err := other.NextSeqs(ctx, []client.SeqItem{{Key: []byte("k"), Count: 1}}); status.Code(err) != codes.InvalidArgument {
			t.Errorf("NextSeqs on a snowflake generator: %v", err)
		}
		if _, err := other.CurrentSeq(ctx, []byte("k")); status.Code(err) != codes.InvalidArgument {
			t.Errorf("CurrentSeq on a snowflake generator: %v", err)
		}
		missing := newClient(t, []string{a.addr}, client.WithGenerator("nope"))
		if _, err := missing.NextSeq(ctx, []byte("k"), 1); status.Code(err) != codes.NotFound {
			t.Errorf("NextSeq on an unknown generator: %v", err)
		}
	})

	t.Run("node stopped", func(t *testing.T) {
		// c (not the client's endpoint) stops gracefully while 8 callers
		// draw; its sections move to a and b.
		var movedKeys [][]byte
		for _, k := range keys {
			if ownerOf(m, k) == c.addr {
				movedKeys = append(movedKeys, k)
			}
		}
		stop := make(chan struct{})
		var stopped atomic.Int64 // sc.now() when c had exited
		go func() {
			time.Sleep(time.Second)
			if err := c.cmd.Process.Signal(syscall.SIGTERM); err != nil {
				t.Error(err)
			}
			select {
			case <-c.done:
			case <-time.After(15 * time.Second):
				t.Error("node c did not stop within 15 s of SIGTERM")
			}
			stopped.Store(int64(sc.now()))
			time.Sleep(3 * time.Second)
			close(stop)
		}()
		var after seqcheck.Recorder
		errs := drawSeq(t, sc, cl, &after, keys, 8, 8*time.Second, stop)
		for _, err := range errs {
			t.Error(err)
		}
		calls := after.Calls()
		for _, x := range calls {
			rec.Add(x)
		}
		checkSeqCalls(t, &rec)
		// Keys of c's sections were served after c was gone.
		moved := map[string]bool{}
		for _, k := range movedKeys {
			moved[string(k)] = true
		}
		served := 0
		for _, x := range calls {
			if moved[x.Key] && x.Start > time.Duration(stopped.Load()) {
				served++
			}
		}
		if served == 0 {
			t.Fatalf("no key of the stopped node's %d keys was served after it stopped (%d calls)", len(movedKeys), len(calls))
		}
		nm := sc.waitStable(t, []*node{a, b})
		for _, o := range nm {
			if o == c.addr {
				t.Fatalf("the stopped node still owns a section: %v", nm)
			}
		}
		t.Logf("%d calls (%d of the moved keys after the stop), slowest %v, stats %+v", len(calls), served, slowest(calls), cl.Stats())
	})

	t.Run("node joined", func(t *testing.T) {
		// A fourth node joins while 8 callers draw: sections move to it
		// from a and b, and the client, whose map names their old owners,
		// is told so (WRONG_NODE or SECTION_MOVING) and reaches the new
		// node, an address it never had, within the calls' deadlines.
		before := cl.Stats()
		stop := make(chan struct{})
		var after seqcheck.Recorder
		drawn := make(chan []error, 1)
		go func() { drawn <- drawSeq(t, sc, cl, &after, keys, 8, 8*time.Second, stop) }()
		time.Sleep(500 * time.Millisecond)
		_, _, etcdURL := a.slot(t)
		joined := startNode(t, sc.bin, "--etcd", etcdURL, "--generator", "default=snowflake", "--generator", "chats=seq")
		nm := sc.waitStable(t, []*node{a, b, joined})
		time.Sleep(time.Second)
		close(stop)
		for _, err := range <-drawn {
			t.Error(err)
		}
		calls := after.Calls()
		for _, x := range calls {
			rec.Add(x)
		}
		checkSeqCalls(t, &rec)
		// The client now routes by the new map: a short draw is not
		// redirected.
		mid := cl.Stats()
		quiet := make(chan struct{})
		time.AfterFunc(time.Second, func() { close(quiet) })
		for _, err := range drawSeq(t, sc, cl, &after, keys, 4, 5*time.Second, quiet) {
			t.Error(err)
		}
		if s := cl.Stats(); s.SeqRedirects != mid.SeqRedirects {
			t.Errorf("%d redirects once the map settled", s.SeqRedirects-mid.SeqRedirects)
		}
		checkSeqCalls(t, &after)
		s := cl.Stats()
		t.Logf("%d calls during the join, slowest %v; %d redirects, %d retries, %d map reads; %d sections on the new node",
			len(calls), slowest(calls), s.SeqRedirects-before.SeqRedirects, s.SeqRetries-before.SeqRetries,
			s.SeqMapRefreshes-before.SeqMapRefreshes, count(nm, joined.addr))
	})
}

func slowest(calls []seqcheck.Call) time.Duration {
	var d time.Duration
	for _, x := range calls {
		d = max(d, x.End-x.Start)
	}
	return d
}

func count(m []string, addr string) int {
	n := 0
	for _, a := range m {
		if a == addr {
			n++
		}
	}
	return n
}

// errorInfo is the ErrorInfo of a gRPC error (nil without one).
func errorInfo(err error) *errdetails.ErrorInfo {
	st, _ := status.FromError(err)
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok {
			return info
		}
	}
	return nil
}
