package load

import (
	"context"
	"net"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	firnv1 "github.com/firnid/firn/client/firnv1"
	"github.com/firnid/firn/seq"
)

// seqShort keeps a sequence run's record small (3.2 MB) beside short.
var seqShort = []string{"--seq-record", "100000"}

func TestKeyDrawDeterministic(t *testing.T) {
	draws := func(dist string, keys int, seed uint64, caller, n int) []uint32 {
		d := newKeyDraw(dist, keys, seed, caller)
		out := make([]uint32, n)
		for i := range out {
			out[i] = d.next()
		}
		return out
	}
	for _, dist := range []string{distUniform, distZipf} {
		a, b := draws(dist, 1000, 7, 3, 2000), draws(dist, 1000, 7, 3, 2000)
		if !slices.Equal(a, b) {
			t.Fatalf("%s: two draws of the same seed and caller differ", dist)
		}
		if slices.Equal(a, draws(dist, 1000, 7, 4, 2000)) || slices.Equal(a, draws(dist, 1000, 8, 3, 2000)) {
			t.Fatalf("%s: another caller or seed draws the same keys", dist)
		}
		for _, k := range a {
			if k >= 1000 {
				t.Fatalf("%s: key %d outside [0, 1000)", dist, k)
			}
		}
	}
	// The shapes: zipf's key 0 takes about 13 % at 100,000 keys (the doc
	// says so), and more than key 1; uniform's keys are about equal.
	const n = 200_000
	count := func(dist string) map[uint32]int {
		c := map[uint32]int{}
		for _, k := range draws(dist, 100_000, 1, 0, n) {
			c[k]++
		}
		return c
	}
	z := count(distZipf)
	if f := float64(z[0]) / n; f < 0.10 || f > 0.17 || z[1] >= z[0] {
		t.Fatalf("zipf: key 0 drawn %.3f of the time (key 1: %d, key 0: %d); want about 0.13 and the hottest", f, z[1], z[0])
	}
	u := count(distUniform)
	if u[0] > 20 || len(u) < 80_000 {
		t.Fatalf("uniform: key 0 drawn %d times of %d, %d distinct keys", u[0], n, len(u))
	}
	// One key: every draw is key 0.
	for _, dist := range []string{distUniform, distZipf} {
		if d := draws(dist, 1, 1, 0, 10); slices.ContainsFunc(d, func(k uint32) bool { return k != 0 }) {
			t.Fatalf("%s over one key: %v", dist, d)
		}
	}
	if got := string(appendKey([]byte("x"), 4294967295)); got != "xk4294967295" || len(got)-1 != maxKeyLen {
		t.Fatalf("appendKey: %q", got)
	}
}

func TestGroupByOwner(t *testing.T) {
	// Sections 0..7, owners by section: 0,1,2 → owner 2; others → owner 0;
	// section 7 → owner 4 (an owner learned later: the groups grow).
	route := func(s int) int {
		switch {
		case s == 7:
			return 4
		case s <= 2:
			return 2
		}
		return 0
	}
	secs := []int{5, 1, 7, 0, 3, 2, 7}
	groups := groupByOwner([]int{0, 1, 2, 3, 4, 5, 6}, secs, route, nil)
	want := [][]int{{0, 4}, nil, {1, 3, 5}, nil, {2, 6}}
	if len(groups) != len(want) {
		t.Fatalf("groups %v, want %v", groups, want)
	}
	for o := range want {
		if !slices.Equal(groups[o], want[o]) {
			t.Fatalf("owner %d: items %v, want %v (all: %v)", o, groups[o], want[o], groups)
		}
	}
	// Reused: emptied first, only the pending items placed.
	groups = groupByOwner([]int{2, 4}, secs, route, groups)
	if len(groups[0]) != 1 || groups[0][0] != 4 || len(groups[2]) != 0 || !slices.Equal(groups[4], []int{2}) {
		t.Fatalf("second round: %v", groups)
	}
}

// fakeSeqNode is a wrong or partial sequence node for the tests, over the
// no-op service: it owns the sections owns says and refuses the others
// WRONG_NODE naming other; wrong makes it hand out values against the
// rules ("twice": every call gets 1; "order": values decrease).
type fakeSeqNode struct {
	*noopService
	owns  func(section int) bool
	other string
	wrong string
	down  atomic.Uint64
}

func (f *fakeSeqNode) wrongNode(key []byte) error {
	if f.owns == nil || f.owns(seq.Definition{Sections: f.sections}.Section(seq.Hash(key))) {
		return nil
	}
	st, _ := status.New(codes.FailedPrecondition, "owned by "+f.other).WithDetails(&errdetails.ErrorInfo{
		Reason: reasonWrongNode, Domain: "firn.v1.IDService", Metadata: map[string]string{"owner": f.other}})
	return st.Err()
}

func (f *fakeSeqNode) first(n uint64) uint64 {
	switch f.wrong {
	case "twice":
		return 1
	case "order":
		return 1<<40 - f.down.Add(n)
	}
	return f.next.Add(n) - n
}

func (f *fakeSeqNode) NextSeq(_ context.Context, req *firnv1.NextSeqRequest) (*firnv1.NextSeqResponse, error) {
	if err := f.wrongNode(req.GetKey()); err != nil {
		return nil, err
	}
	n := uint64(max(req.GetCount(), 1))
	return &firnv1.NextSeqResponse{First: f.first(n), Count: uint32(n)}, nil
}

func (f *fakeSeqNode) NextSeqs(_ context.Context, req *firnv1.NextSeqsRequest) (*firnv1.NextSeqsResponse, error) {
	resp := &firnv1.NextSeqsResponse{}
	for _, it := range req.GetItems() {
		r := &firnv1.SeqResult{}
		if err := f.wrongNode(it.GetKey()); err != nil {
			r.Reason, r.Owner, r.Error = reasonWrongNode, f.other, err.Error()
		} else {
			n := uint64(max(it.GetCount(), 1))
			r.First, r.Count = f.first(n), uint32(n)
		}
		resp.Results = append(resp.Results, r)
	}
	return resp, nil
}

// startFake serves f on a loopback port in this process; lis is its
// listener (its address is f's own, as Info reports it).
func startFake(t *testing.T, lis net.Listener, f *fakeSeqNode) {
	t.Helper()
	srv := grpc.NewServer()
	firnv1.RegisterIDServiceServer(srv, f)
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
}

func listen(t *testing.T) net.Listener {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return lis
}

// TestSeqRouting: two nodes, each owning half the sections, the first's
// Info claiming all of them (a stale map): the run follows the WRONG_NODE
// refusals to the second, learns it, and sends it its keys from then on;
// NextSeqs batches are split between the two, and the items refused are
// sent again to the owner named.
func TestSeqRouting(t *testing.T) {
	const sections = 16
	la, lb := listen(t), listen(t)
	a, b := la.Addr().String(), lb.Addr().String()
	even := func(s int) bool { return s%2 == 0 }
	startFake(t, la, &fakeSeqNode{noopService: newNoopService(NoopOptions{Kind: kindSeq, Sections: sections, Address: a, Name: "chats"}),
		owns: even, other: b})
	startFake(t, lb, &fakeSeqNode{noopService: newNoopService(NoopOptions{Kind: kindSeq, Sections: sections, Address: b, Name: "chats"}),
		owns: func(s int) bool { return !even(s) }, other: a})
	const callers = 3
	for _, mode := range []string{modeSeq, modeSeqs} {
		t.Run(mode, func(t *testing.T) {
			r := bench(t, exitOK, append(seqShort, "--target", a, "--generator", "chats", "--mode", mode,
				"--callers", "3", "--keys", "1000", "--warmup", "0s")...).Run
			q := r.Seq
			if q == nil || len(r.Errors) != 0 || r.Calls == 0 || q.Violations != 0 || q.Checked == 0 || q.Checked > q.Responses {
				t.Fatalf("run %+v, seq %+v", r, q)
			}
			if !slices.Equal(q.Owners, []string{a, b}) {
				t.Fatalf("owners %v, want %v (the target, then the owner the refusals named)", q.Owners, []string{a, b})
			}
			// NextSeq: each odd section is refused at most once per caller
			// (a caller may have read the map before another's follow).
			// NextSeqs: every item of an odd section in a caller's first
			// batches, before the follows of one round moved them.
			most := uint64(sections / 2 * callers)
			if mode == modeSeqs {
				most = 2 * 100 * callers
			}
			if q.WrongNode == 0 || q.WrongNode > most || len(q.ItemErrors) != 0 {
				t.Fatalf("WRONG_NODE followed %d (want 1 to %d), item errors %v", q.WrongNode, most, q.ItemErrors)
			}
			switch mode {
			case modeSeq:
				if r.IDs != r.Calls || r.RPCs != r.Calls+q.WrongNode {
					t.Fatalf("%d values, %d calls, %d RPCs, %d followed", r.IDs, r.Calls, r.RPCs, q.WrongNode)
				}
			case modeSeqs:
				// 100 keys per batch split between two owners.
				if q.ItemsPerRPC < 30 || q.ItemsPerRPC > 70 || r.IDs != q.Responses {
					t.Fatalf("%.1f items per NextSeqs, %d values, %d responses", q.ItemsPerRPC, r.IDs, q.Responses)
				}
			}
		})
	}
}

// TestSeqCheckerFails: a fake node that breaks the rules makes the run
// exit 3 naming the violations, in both modes.
func TestSeqCheckerFails(t *testing.T) {
	for _, wrong := range []string{"twice", "order"} {
		lis := listen(t)
		startFake(t, lis, &fakeSeqNode{noopService: newNoopService(NoopOptions{Kind: kindSeq, Sections: 8, Address: lis.Addr().String()}),
			wrong: wrong})
		for _, mode := range []string{modeSeq, modeSeqs} {
			var stdout, stderr strings.Builder
			args := append(append(append([]string{}, short...), seqShort...), "--target", lis.Addr().String(), "--mode", mode, "--keys", "3", "--batch", "2")
			if code := Main(args, &stdout, &stderr); code != exitDuplicate {
				t.Fatalf("%s, %s: exit %d, want %d\n%s", wrong, mode, code, exitDuplicate, stderr.String())
			}
			want := map[string]string{"twice": "value handed out twice", "order": "order: "}[wrong]
			if !strings.Contains(stderr.String(), "SEQUENCE VIOLATIONS") || !strings.Contains(stderr.String(), want) {
				t.Fatalf("%s, %s: stderr does not name the violations (%q):\n%s", wrong, mode, want, stderr.String())
			}
			if !strings.Contains(stdout.String(), `"violations": `) || strings.Contains(stdout.String(), `"violations": 0`) {
				t.Fatalf("%s, %s: report:\n%s", wrong, mode, stdout.String())
			}
		}
	}
}

// TestNoopSeq: the no-op floor as a sequence generator — its Info owns
// every section at its address, values never repeat, bad input is refused
// as a node refuses it — and runs against it pass the checker.
func TestNoopSeq(t *testing.T) {
	ctx := context.Background()
	s := newNoopService(NoopOptions{Kind: kindSeq, Sections: 16, Address: "127.0.0.1:9", Name: "chats"})
	info, err := s.Info(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	g := info.GetGenerators()[0]
	if g.GetKind() != kindSeq || g.GetSections() != 16 || g.GetLayout() != "seq,sections=16" || len(g.GetSectionOwners()) != 16 {
		t.Fatalf("Info %+v", g)
	}
	for i, o := range g.GetSectionOwners() {
		if o.GetSection() != uint32(i) || o.GetAddress() != "127.0.0.1:9" || !o.GetServing() {
			t.Fatalf("section owner %d: %+v", i, o)
		}
	}
	var last uint64
	for _, n := range []uint32{0, 1, 5, seq.MaxCount} {
		r, err := s.NextSeq(ctx, &firnv1.NextSeqRequest{Generator: "chats", Key: []byte("k1"), Count: n})
		if err != nil || r.GetCount() != max(n, 1) || r.GetFirst() <= last {
			t.Fatalf("NextSeq(count %d) = %+v, %v (last value %d)", n, r, err, last)
		}
		last = r.GetFirst() + uint64(r.GetCount()) - 1
	}
	if c, err := s.CurrentSeq(ctx, &firnv1.CurrentSeqRequest{Generator: "chats", Key: []byte("k1")}); err != nil || c.GetValue() < last {
		t.Fatalf("CurrentSeq = %+v, %v; want at least %d", c, err, last)
	}
	for name, req := range map[string]*firnv1.NextSeqRequest{
		"empty key": {Key: nil},
		"long key":  {Key: make([]byte, seq.MaxKey+1)},
		"count":     {Key: []byte("k"), Count: seq.MaxCount + 1},
		"generator": {Generator: "other", Key: []byte("k")},
	} {
		if _, err := s.NextSeq(ctx, req); status.Code(err) != codes.InvalidArgument && status.Code(err) != codes.NotFound {
			t.Fatalf("%s: %v, want refused", name, err)
		}
	}
	resp, err := s.NextSeqs(ctx, &firnv1.NextSeqsRequest{Items: []*firnv1.SeqItem{{Key: []byte("a")}, {Key: nil}, {Key: []byte("a"), Count: 3}}})
	if err != nil {
		t.Fatal(err)
	}
	rs := resp.GetResults()
	if len(rs) != 3 || rs[0].GetCount() != 1 || rs[1].GetReason() != "BAD_REQUEST" || rs[1].GetCount() != 0 ||
		rs[2].GetCount() != 3 || rs[2].GetFirst() <= rs[0].GetFirst() || rs[0].GetFirst() <= last {
		t.Fatalf("NextSeqs: %v", rs)
	}
	if _, err := s.NextSeqs(ctx, &firnv1.NextSeqsRequest{}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("NextSeqs of no items: %v", err)
	}
	if _, err := newNoopService(NoopOptions{}).NextSeq(ctx, &firnv1.NextSeqRequest{Key: []byte("k")}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("NextSeq of a snowflake no-op: %v", err)
	}

	// Runs against the child process, in both modes.
	for _, mode := range []string{modeSeq, modeSeqs} {
		r := bench(t, exitOK, append(seqShort, "--target", "noop", "--mode", mode, "--callers", "2", "--key-dist", "zipf")...).Run
		q := r.Seq
		// The record (100,000) bounds what is checked.
		if q == nil || r.Calls == 0 || len(r.Errors) != 0 || q.Violations != 0 || q.Checked == 0 || q.Checked > q.Responses ||
			(q.Checked < q.Responses && q.Checked < 99_000) ||
			q.WrongNode != 0 || q.Sections != seq.DefaultSections || len(q.Owners) != 1 || r.ServerCPU == nil {
			t.Fatalf("%s: run %+v, seq %+v", mode, r, q)
		}
		want := map[string]int{modeSeq: 1, modeSeqs: 100}[mode]
		if r.Batch != want || r.IDs != q.Responses || (mode == modeSeqs && q.ItemsPerRPC != 100) {
			t.Fatalf("%s: batch %d (want the default %d), %d values, %d responses, %.1f items per RPC", mode, r.Batch, want, r.IDs, q.Responses, q.ItemsPerRPC)
		}
	}
}

func TestSeqFlags(t *testing.T) {
	for _, args := range [][]string{
		{"--mode", "seq", "--batch", "10001"},
		{"--mode", "seqs", "--batch", "1001"},
		{"--mode", "seq", "--keys", "0"},
		{"--mode", "seq", "--key-dist", "pareto"},
		{"--mode", "seq", "--seq-record", "-1"},
		{"--mode", "seq", "--noop-duplicate-at", "5"},
		{"--mode", "seqs", "--flood-callers", "5"},
	} {
		var out strings.Builder
		if code := Main(args, &out, &out); code != exitUsage {
			t.Errorf("%v: exit %d, want %d (%s)", args, code, exitUsage, out.String())
		}
	}
}

func TestParseSeqMetrics(t *testing.T) {
	const text = `# TYPE firn_seq_writes_total counter
firn_seq_writes_total{generator="chats"} 120
firn_seq_writes_total{generator="other"} 5
firn_seq_keys{generator="chats"} 4500
firn_segment_claims_total{generator="orders"} 9
`
	m, found, err := parseSeqMetrics(strings.NewReader(text), "chats")
	if err != nil || !found || m.writes != 120 || m.keys != 4500 {
		t.Fatalf("chats: %+v found %v err %v", m, found, err)
	}
	if _, found, _ := parseSeqMetrics(strings.NewReader(text), "orders"); found {
		t.Fatal("orders (a segment generator) found as a sequence generator")
	}
	w := m.since(seqMetrics{writes: 100}, "chats", 4)
	if w.Writes != 20 || w.PerSecond != 5 || w.Keys != 4500 {
		t.Fatalf("since: %+v", w)
	}
}

func TestSeqDialAddr(t *testing.T) {
	r := &seqRouter{targetHost: "10.0.0.5"}
	for in, want := range map[string]string{
		"0.0.0.0:7300":   "10.0.0.5:7300",
		":7300":          "10.0.0.5:7300",
		"[::]:7300":      "10.0.0.5:7300",
		"127.0.0.1:7300": "127.0.0.1:7300",
		"node-b:7300":    "node-b:7300",
	} {
		if got := r.dialAddr(in); got != want {
			t.Errorf("dialAddr(%q) = %q, want %q", in, got, want)
		}
	}
}
