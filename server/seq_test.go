package server_test

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	firnv1 "github.com/firnid/firn/client/firnv1"
	"github.com/firnid/firn/internal/seqcheck"
	"github.com/firnid/firn/internal/testing/etcdtest"
	"github.com/firnid/firn/seq"
	"github.com/firnid/firn/server/core"
)

// seqGen adds a sequence generator named name with definition def after
// the node's other generators.
func seqGen(name, def string) func(*core.Config) {
	return func(c *core.Config) {
		d, err := seq.ParseDefinition(def)
		if err != nil {
			panic(err)
		}
		if len(c.Generators) == 0 {
			generators("default=snowflake")(c)
		}
		cd := d.Counter()
		c.Generators = append(c.Generators, core.GeneratorConfig{Name: name, Segment: &cd})
	}
}

// seqRouter calls the owner of each key's section, following WRONG_NODE
// refusals to the owner they name and retrying SECTION_MOVING ones.
type seqRouter struct {
	t     *testing.T
	mu    sync.Mutex
	conns map[string]firnv1.IDServiceClient
	hops  int // WRONG_NODE refusals followed
}

func (r *seqRouter) client(addr string) firnv1.IDServiceClient {
	r.mu.Lock()
	defer r.mu.Unlock()
	if c, ok := r.conns[addr]; ok {
		return c
	}
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		r.t.Fatalf("dial %s: %v", addr, err)
	}
	r.t.Cleanup(func() { cc.Close() })
	c := firnv1.NewIDServiceClient(cc)
	r.conns[addr] = c
	return c
}

// errorInfo is err's ErrorInfo, if it carries one.
func errorInfo(err error) *errdetails.ErrorInfo {
	st, _ := status.FromError(err)
	for _, d := range st.Details() {
		if ei, ok := d.(*errdetails.ErrorInfo); ok {
			return ei
		}
	}
	return nil
}

// next asks a random node of addrs for count values of key, following
// refusals until ctx ends.
func (r *seqRouter) next(ctx context.Context, addrs []string, key string, count uint32) (first uint64, err error) {
	addr := addrs[rand.IntN(len(addrs))]
	for {
		resp, err := r.client(addr).NextSeq(ctx, &firnv1.NextSeqRequest{Generator: "chats", Key: []byte(key), Count: count})
		if err == nil {
			return resp.First, nil
		}
		ei := errorInfo(err)
		switch {
		case ei != nil && ei.Reason == "WRONG_NODE":
			if status.Code(err) != codes.FailedPrecondition || ei.Metadata["owner"] == "" {
				return 0, fmt.Errorf("WRONG_NODE without an owner or with code %v: %v", status.Code(err), err)
			}
			r.mu.Lock()
			r.hops++
			r.mu.Unlock()
			addr = ei.Metadata["owner"]
		case ei == nil && status.Code(err) == codes.Unavailable:
			// The node is gone: another one.
			addr = addrs[rand.IntN(len(addrs))]
			select {
			case <-ctx.Done():
				return 0, fmt.Errorf("%w (last refusal: %v)", ctx.Err(), err)
			case <-time.After(20 * time.Millisecond):
			}
		case ei != nil && (ei.Reason == "SECTION_MOVING" || ei.Reason == "STARTING" || ei.Reason == "DRAINING"):
			select {
			case <-ctx.Done():
				return 0, fmt.Errorf("%w (last refusal: %v)", ctx.Err(), err)
			case <-time.After(50 * time.Millisecond):
			}
		default:
			return 0, err
		}
	}
}

// TestSeqGenerator: three nodes serve one sequence generator on a shared
// etcd. Callers on random keys, each call sent to a random node and routed
// to the key's owner by the refusals: every key's values never repeat and
// strictly increase in real time (seqcheck), through a graceful stop of
// one node mid-load (its sections move to the others) and its return.
// Info gives the section map (every section owned by a live node); bad
// input and a generator of another kind are refused naming the bound;
// HTTP serves the same sequences.
func TestSeqGenerator(t *testing.T) {
	e := etcdtest.StartEmbedded(t)
	opts := []func(*core.Config){seqGen("chats", "seq,sections=16"), sharedCoordinator}
	nodes := []*tnode{
		startNamedNode(t, "seq-a", e.Endpoints, t.TempDir(), opts...),
		startNamedNode(t, "seq-b", e.Endpoints, t.TempDir(), opts...),
		startNamedNode(t, "seq-c", e.Endpoints, t.TempDir(), opts...),
	}
	for _, n := range nodes {
		waitServing(t, n.ids, "chats", 30*time.Second)
	}
	r := &seqRouter{t: t, conns: map[string]firnv1.IDServiceClient{}}
	var addrs []string
	for _, n := range nodes {
		addrs = append(addrs, n.node.GRPCAddr())
	}

	// The section map: every section owned by one of the three, each
	// owning some, within a few rounds of the last start.
	deadline := time.Now().Add(20 * time.Second)
	for {
		gi := nodes[0].genInfo(t, "chats")
		if gi.Kind != "seq" || gi.Sections != 16 || len(gi.SectionOwners) != 16 {
			t.Fatalf("Info: kind %q, %d sections, %d owners; want seq, 16, 16", gi.Kind, gi.Sections, len(gi.SectionOwners))
		}
		per := map[string]int{}
		for _, o := range gi.SectionOwners {
			if o.Serving {
				per[o.Address]++
			}
		}
		if len(per) == 3 && per[addrs[0]]+per[addrs[1]]+per[addrs[2]] == 16 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("section map after 20 s: %v (want all 16 sections serving on the three nodes %v)", per, addrs)
		}
		time.Sleep(200 * time.Millisecond)
	}

	var rec seqcheck.Recorder
	start := time.Now()
	load := func(ctx context.Context, caller int, stop <-chan struct{}) error {
		rng := rand.New(rand.NewPCG(uint64(caller), 7))
		for {
			select {
			case <-stop:
				return nil
			default:
			}
			key := fmt.Sprintf("conv-%d", rng.IntN(40))
			count := uint32(1 + rng.IntN(3))
			cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			s := time.Since(start)
			first, err := r.next(cctx, addrs, key, count)
			end := time.Since(start)
			cancel()
			if err != nil {
				return fmt.Errorf("caller %d key %s: %w", caller, key, err)
			}
			rec.Add(seqcheck.Call{Key: key, First: first, Count: uint64(count), Start: s, End: end, Who: fmt.Sprint("caller ", caller)})
		}
	}
	run := func(d time.Duration, during func()) {
		ctx, cancel := context.WithTimeout(context.Background(), d+30*time.Second)
		defer cancel()
		stop := make(chan struct{})
		errs := make(chan error, 8)
		var wg sync.WaitGroup
		for c := range 8 {
			wg.Go(func() {
				if err := load(ctx, c, stop); err != nil {
					errs <- err
				}
			})
		}
		if during != nil {
			during()
		}
		time.Sleep(d)
		close(stop)
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
	}
	run(2*time.Second, nil)
	hops := r.hops
	if hops == 0 {
		t.Errorf("no WRONG_NODE refusal followed: calls were sent to random nodes")
	}

	// A graceful stop of b mid-load: its sections move to a and c.
	run(3*time.Second, func() {
		time.Sleep(500 * time.Millisecond)
		nodes[1].stop()
	})
	gi := nodes[0].genInfo(t, "chats")
	for _, o := range gi.SectionOwners {
		if o.Address == addrs[1] {
			t.Errorf("section %d still owned by the stopped node %s", o.Section, addrs[1])
		}
	}
	if v := seqcheck.Check(rec.Calls(), 10); len(v) > 0 {
		t.Fatalf("%d calls: per-key rule broken: %v", rec.Len(), v)
	}
	if rec.Len() < 500 {
		t.Errorf("only %d calls in 5 s", rec.Len())
	}

	// Bad input, each refused naming the bound.
	cli := nodes[0].ids
	for _, tc := range []struct {
		req   *firnv1.NextSeqRequest
		field string
	}{
		{&firnv1.NextSeqRequest{Generator: "chats", Key: nil}, "key"},
		{&firnv1.NextSeqRequest{Generator: "chats", Key: []byte(strings.Repeat("k", seq.MaxKey+1))}, "key"},
		{&firnv1.NextSeqRequest{Generator: "chats", Key: []byte("k"), Count: seq.MaxCount + 1}, "count"},
		{&firnv1.NextSeqRequest{Generator: "default", Key: []byte("k")}, "generator"},
	} {
		_, err := cli.NextSeq(ctx(t), tc.req)
		ei := errorInfo(err)
		if status.Code(err) != codes.InvalidArgument || ei == nil || ei.Metadata["field"] != tc.field || ei.Metadata["limit"] == "" {
			t.Errorf("NextSeq(%q, %d bytes, count %d): %v; want INVALID_ARGUMENT naming %s and its bound", tc.req.Generator, len(tc.req.Key), tc.req.Count, err, tc.field)
		}
	}
	if _, err := cli.NextSeq(ctx(t), &firnv1.NextSeqRequest{Generator: "nope", Key: []byte("k")}); status.Code(err) != codes.NotFound {
		t.Errorf("NextSeq on an unknown generator: %v, want NOT_FOUND", err)
	}
	if _, err := cli.NextID(ctx(t), &firnv1.NextIDRequest{Generator: "chats"}); status.Code(err) != codes.InvalidArgument {
		t.Errorf("NextID on a sequence generator: %v, want INVALID_ARGUMENT", err)
	}

	// NextSeqs: one result per item, in order; keys of other nodes
	// refused alone, naming their owner.
	var items []*firnv1.SeqItem
	for i := range 50 {
		items = append(items, &firnv1.SeqItem{Key: []byte(fmt.Sprintf("batch-%d", i)), Count: 2})
	}
	resp, err := cli.NextSeqs(ctx(t), &firnv1.NextSeqsRequest{Generator: "chats", Items: items})
	if err != nil || len(resp.Results) != len(items) {
		t.Fatalf("NextSeqs: %v, %d results", err, len(resp.GetResults()))
	}
	served, wrong := 0, 0
	for i, res := range resp.Results {
		switch {
		case res.Reason == "" && res.Count == 2 && res.First >= 1:
			served++
			cur, err := cli.CurrentSeq(ctx(t), &firnv1.CurrentSeqRequest{Generator: "chats", Key: items[i].Key})
			if err != nil || cur.Value != res.First+1 {
				t.Errorf("CurrentSeq(%s) = %v, %v; want %d", items[i].Key, cur.GetValue(), err, res.First+1)
			}
		case res.Reason == "WRONG_NODE" && res.Owner == addrs[2]:
			wrong++
		default:
			t.Errorf("NextSeqs item %d: %+v", i, res)
		}
	}
	if served == 0 || wrong == 0 {
		t.Errorf("NextSeqs on a: %d served, %d WRONG_NODE; want both (the keys spread over a and c)", served, wrong)
	}

	// HTTP: the same sequences, to the key's owner.
	n0 := nodes[0]
	var key string
	for i := range 100 {
		k := fmt.Sprintf("http-%d", i)
		if _, err := cli.CurrentSeq(ctx(t), &firnv1.CurrentSeqRequest{Generator: "chats", Key: []byte(k)}); err == nil {
			key = k
			break
		}
	}
	if key == "" {
		t.Fatal("no key of node a among 100")
	}
	cur, err := cli.CurrentSeq(ctx(t), &firnv1.CurrentSeqRequest{Generator: "chats", Key: []byte(key)})
	if err != nil {
		t.Fatal(err)
	}
	for i := uint64(1); i <= 2; i++ {
		want := cur.Value + i
		req, _ := http.NewRequest("POST", n0.base+"/v1/seq", strings.NewReader(fmt.Sprintf(`{"generator":"chats","key":%q}`, key)))
		req.Header.Set("Content-Type", "application/json")
		resp, err := n0.httpc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if w := fmt.Sprintf(`"last":"%d","count":1`, want); resp.StatusCode != 200 || !strings.Contains(string(b), w) {
			t.Errorf("POST /v1/seq #%d: %d %s; want %s", i, resp.StatusCode, b, w)
		}
	}
}
