package load

import (
	"bytes"
	"context"
	"math"
	"net"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	firnv1 "github.com/firnid/firn/client/firnv1"
	"github.com/firnid/firn/internal/intervals"
)

// checkRanges is checkRun plus what ranges mode adds: every ID checked,
// no malformed response, the capacity ratio consistent.
func checkRanges(t *testing.T, r *Result, count uint64, workers int, capacity float64) {
	t.Helper()
	checkRun(t, r, count)
	if r.Mode != modeRanges || r.Batch != int(count) {
		t.Fatalf("mode %q batch %d", r.Mode, r.Batch)
	}
	if r.Checked != r.IDs || r.Malformed != 0 || r.Intervals < 1 {
		t.Fatalf("checked %d of %d IDs, %d malformed, %d intervals", r.Checked, r.IDs, r.Malformed, r.Intervals)
	}
	if r.Workers != workers || r.Capacity != capacity {
		t.Fatalf("%d workers, capacity %.0f; want %d, %.0f", r.Workers, r.Capacity, workers, capacity)
	}
	if want := ratio(r.IDsPS, r.Capacity); r.CapacityRatio != want {
		t.Fatalf("capacity ratio %v, want %v", r.CapacityRatio, want)
	}
}

// startNoopNode serves the no-op API in this process as a stand-in node
// with the options given.
func startNoopNode(t *testing.T, o NoopOptions) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := NewNoopServer(nil, o)
	done := make(chan struct{})
	go func() { defer close(done); srv.Serve(lis) }()
	t.Cleanup(func() { srv.Stop(); <-done })
	return lis.Addr().String()
}

func TestNoopRanges(t *testing.T) {
	rep := bench(t, exitOK, "--target", "noop", "--mode", "ranges", "--batch", "10000", "--callers", "3", "--conns", "2")
	// The bare no-op counter's layout does not parse: capacity unknown.
	checkRanges(t, rep.Run, 10000, 1, 0)
}

// TestRangesCompare: the no-op child takes the node's layout, workers and
// max_range, so both report the same capacity.
func TestRangesCompare(t *testing.T) {
	addr := startNoopNode(t, NoopOptions{Base: 1 << 40, Layout: "snowflake", Workers: []uint32{3, 4, 9}, MaxRange: 50_000})
	rep := bench(t, exitOK, "--target", addr, "--compare", "noop", "--mode", "ranges", "--batch", "20000",
		"--duration", "150ms", "--warmup", "50ms", "--callers", "2")
	c := rep.Compare
	if c == nil || len(c.Pairs) != minPairs {
		t.Fatalf("compare %+v", c)
	}
	const capacity = 3 * 4_096_000
	for _, p := range c.Pairs {
		checkRanges(t, p.Node, 20000, 3, capacity)
		checkRanges(t, p.Noop, 20000, 3, capacity)
		if p.Noop.Target == addr {
			t.Fatal("the noop run went to the node")
		}
	}
	var text bytes.Buffer
	writeText(&text, rep)
	if !strings.Contains(text.String(), "capacity (3 workers, 12288000 IDs/s): node delivered") {
		t.Fatalf("text report without the capacity line:\n%s", text.String())
	}
}

// TestRangesMaxRange: a --batch above the generator's max_range is refused
// before the run, naming the field.
func TestRangesMaxRange(t *testing.T) {
	addr := startNoopNode(t, NoopOptions{MaxRange: 5000})
	var stdout, stderr bytes.Buffer
	code := Main(append(append([]string{}, short...), "--target", addr, "--mode", "ranges", "--batch", "5001"), &stdout, &stderr)
	if code != exitFailed || !strings.Contains(stderr.String(), "--batch 5001 above generator \"default\"'s max_range 5000") {
		t.Fatalf("exit %d, stderr %q", code, stderr.String())
	}
}

// TestRangesOverload: the flood scenario in ranges mode checks the three
// windows against each other.
func TestRangesOverload(t *testing.T) {
	addr := startNoopNode(t, NoopOptions{Base: 1 << 40, Layout: "snowflake"})
	o := bench(t, exitOK, "--target", addr, "--mode", "ranges", "--batch", "5000", "--duration", "200ms", "--warmup", "50ms",
		"--flood-callers", "2", "--flood-conns", "1", "--flood-batch", "1000").Overload
	if o == nil {
		t.Fatal("no overload report")
	}
	checkRanges(t, o.Alone, 5000, 1, 4_096_000)
	checkRanges(t, o.Loaded, 5000, 1, 4_096_000)
	checkRun(t, o.Flood, 1000)
	if o.CrossDups != 0 {
		t.Fatalf("%d IDs received by two windows of one counter", o.CrossDups)
	}
}

// sameRange is a broken node: every call gets the same IDs, from 1<<40.
type sameRange struct{ *noopService }

func (s sameRange) NextRange(_ context.Context, req *firnv1.NextRangeRequest) (*firnv1.NextRangeResponse, error) {
	return &firnv1.NextRangeResponse{Runs: []*firnv1.Run{{First: 1 << 40, Count: req.GetCount()}}}, nil
}

func (s sameRange) NextIDs(_ context.Context, req *firnv1.NextIDsRequest) (*firnv1.NextIDsResponse, error) {
	ids := make([]uint64, req.GetCount())
	for i := range ids {
		ids[i] = 1<<40 + uint64(i)
	}
	return &firnv1.NextIDsResponse{Ids: ids}, nil
}

// serve serves svc in this process until the test ends.
func serve(t *testing.T, svc firnv1.IDServiceServer) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	firnv1.RegisterIDServiceServer(srv, svc)
	done := make(chan struct{})
	go func() { defer close(done); srv.Serve(lis) }()
	t.Cleanup(func() { srv.Stop(); <-done })
	return lis.Addr().String()
}

// TestRangesDuplicatesAcrossCallers: callers handed the same IDs; all but
// the first copy of each are duplicates, whether the same caller or
// another received it before.
func TestRangesDuplicatesAcrossCallers(t *testing.T) {
	addr := serve(t, sameRange{newNoopService(NoopOptions{})})
	r := bench(t, exitDuplicate, "--target", addr, "--mode", "ranges", "--batch", "100", "--callers", "3").Run
	if r.Calls < 2 || r.Dups != r.IDs-100 || r.Checked != r.IDs || r.Intervals != 1 || r.Malformed != 0 {
		t.Fatalf("%d calls, %d IDs: %d duplicates (want %d), %d checked, %d intervals, %d malformed",
			r.Calls, r.IDs, r.Dups, r.IDs-100, r.Checked, r.Intervals, r.Malformed)
	}
}

// TestRangesOverloadCrossDuplicates: the run alone, the run with the
// flood and the flood all get IDs from 1<<40: those of the 50 the flood
// asks for are in three windows (2 duplicates each), the next 50 of the
// run's 100 in two.
func TestRangesOverloadCrossDuplicates(t *testing.T) {
	addr := serve(t, sameRange{newNoopService(NoopOptions{Layout: "snowflake"})})
	o := bench(t, exitDuplicate, "--target", addr, "--mode", "ranges", "--batch", "100", "--duration", "100ms", "--warmup", "0s",
		"--flood-callers", "1", "--flood-conns", "1", "--flood-batch", "50").Overload
	if o.CrossDups != 50*2+50 {
		t.Fatalf("%d IDs in more than one window, want 150", o.CrossDups)
	}
}

// shortRange is a broken node: NextRange returns one ID fewer than asked.
type shortRange struct{ *noopService }

func (s shortRange) NextRange(ctx context.Context, req *firnv1.NextRangeRequest) (*firnv1.NextRangeResponse, error) {
	return s.noopService.NextRange(ctx, &firnv1.NextRangeRequest{Count: req.GetCount() - 1})
}

// TestRangesMalformed: responses that break NextRange's contract are
// counted, and fail the run.
func TestRangesMalformed(t *testing.T) {
	addr := serve(t, shortRange{newNoopService(NoopOptions{})})
	r := bench(t, exitFailed, "--target", addr, "--mode", "ranges", "--batch", "100").Run
	if r.Calls == 0 || r.Malformed != r.Calls || r.Dups != 0 || r.IDs != 99*r.Calls {
		t.Fatalf("%d calls, %d malformed, %d duplicates, %d IDs", r.Calls, r.Malformed, r.Dups, r.IDs)
	}
}

// moreWorkers is a node that takes a second worker after the first Info.
type moreWorkers struct {
	*noopService
	infos atomic.Int32
}

func (s *moreWorkers) Info(ctx context.Context, req *firnv1.InfoRequest) (*firnv1.InfoResponse, error) {
	info, err := s.noopService.Info(ctx, req)
	if s.infos.Add(1) > 1 {
		info.Generators[0].Workers = []uint32{0, 1}
	}
	return info, err
}

// TestRangesWorkersGrow: capacity counts the workers held after the
// window when the node took more during it.
func TestRangesWorkersGrow(t *testing.T) {
	addr := serve(t, &moreWorkers{noopService: newNoopService(NoopOptions{Layout: "snowflake"})})
	checkRanges(t, bench(t, exitOK, "--target", addr, "--mode", "ranges").Run, 1000, 2, 2*4_096_000)
}

func TestCrossDuplicates(t *testing.T) {
	var alone, loaded intervals.Set
	alone.Add(100, 50)  // 100..149
	loaded.Add(140, 20) // 140..159: 10 shared with alone
	loaded.Add(500, 10)
	// 505 and 159 are in loaded too, 149 in both: 10 + 1 + 1 + 1.
	flood := []uint64{505, 1, 2, 3, 159, 149, 1000}
	if got := crossDuplicates(flood, &alone, &loaded); got != 13 {
		t.Fatalf("crossDuplicates = %d, want 13", got)
	}
	if got := crossDuplicates(nil, &alone); got != 0 {
		t.Fatalf("one window alone: %d", got)
	}
}

// TestAddRuns: the caller's check of one response.
func TestAddRuns(t *testing.T) {
	runs := func(pairs ...uint64) []*firnv1.Run {
		var rs []*firnv1.Run
		for i := 0; i < len(pairs); i += 2 {
			rs = append(rs, &firnv1.Run{First: pairs[i], Count: pairs[i+1]})
		}
		return rs
	}
	for _, tc := range []struct {
		name                          string
		runs                          []*firnv1.Run
		asked                         uint64
		ids, dups, checked, malformed uint64
	}{
		{"good", runs(10, 5, 20, 5), 10, 10, 0, 10, 0},
		{"adjacent", runs(10, 5, 15, 5), 10, 10, 0, 10, 0},
		{"short", runs(10, 5), 10, 5, 0, 5, 1},
		{"empty response", nil, 10, 0, 0, 0, 1},
		{"empty run", runs(10, 5, 20, 0, 30, 5), 10, 10, 0, 10, 1},
		{"not increasing", runs(20, 5, 10, 5), 10, 10, 0, 10, 1},
		{"overlapping", runs(10, 5, 12, 5), 10, 10, 3, 10, 1},
		{"past 2^64-1", runs(math.MaxUint64-1, 3), 3, 3, 0, 0, 1},
	} {
		w := &worker{}
		ids := w.addRuns(tc.runs, tc.asked)
		if ids != tc.ids || w.dups != tc.dups || w.checked != tc.checked || w.malformed != tc.malformed {
			t.Errorf("%s: ids %d dups %d checked %d malformed %d; want %d %d %d %d", tc.name,
				ids, w.dups, w.checked, w.malformed, tc.ids, tc.dups, tc.checked, tc.malformed)
		}
	}
	// Across responses: a run seen before is a duplicate, not malformed.
	w := &worker{}
	w.addRuns(runs(10, 5), 5)
	w.addRuns(runs(14, 5), 5)
	if w.dups != 1 || w.malformed != 0 {
		t.Fatalf("across responses: dups %d malformed %d", w.dups, w.malformed)
	}
}

// nextRange calls the no-op service's NextRange and checks NextRange's
// contract.
func nextRange(t *testing.T, s *noopService, count uint64) []*firnv1.Run {
	t.Helper()
	resp, err := s.NextRange(context.Background(), &firnv1.NextRangeRequest{Count: count})
	if err != nil {
		t.Fatal(err)
	}
	var sum uint64
	for i, r := range resp.GetRuns() {
		if r.GetCount() == 0 || (i > 0 && r.GetFirst() <= resp.GetRuns()[i-1].GetFirst()+resp.GetRuns()[i-1].GetCount()-1) {
			t.Fatalf("run %d of %v breaks the contract", i, resp.GetRuns())
		}
		sum += r.GetCount()
	}
	if sum != count {
		t.Fatalf("runs hold %d IDs, asked %d", sum, count)
	}
	return resp.GetRuns()
}

func counts(rs []*firnv1.Run) []uint64 {
	var c []uint64
	for _, r := range rs {
		c = append(c, r.GetCount())
	}
	return c
}

// TestNoopNextRangeShape: the no-op server's runs are those a node of the
// layout holding the workers would return.
func TestNoopNextRangeShape(t *testing.T) {
	t.Run("counter", func(t *testing.T) {
		// Snowflake's blocks of 4096, from ID 1.
		rs := nextRange(t, newNoopService(NoopOptions{}), 10_000)
		if got := counts(rs); !slices.Equal(got, []uint64{4095, 4096, 1809}) || rs[0].GetFirst() != 1 || rs[1].GetFirst() != 4096 {
			t.Fatalf("runs %v", rs)
		}
	})
	t.Run("wide snowflake", func(t *testing.T) {
		// Node fields 31 (datacenter 0, worker 31), 32 (datacenter 1,
		// worker 0) and 33 meet; 40 does not: per unit one run of three
		// blocks, one of one.
		s := newNoopService(NoopOptions{Base: 4096 * 4, Layout: "snowflake", Workers: []uint32{31, 32, 33, 40}})
		if got := counts(nextRange(t, s, 4096*8)); !slices.Equal(got, []uint64{3 * 4096, 4096, 3 * 4096, 4096}) {
			t.Fatalf("counts %v", got)
		}
	})
	t.Run("across units", func(t *testing.T) {
		// wideworker: no datacenter bits, 19 worker bits, 8192 per unit.
		// The highest worker's block meets the next unit's worker 0.
		s := newNoopService(NoopOptions{Base: 8192, Layout: "wideworker", Workers: []uint32{0, 1<<19 - 1}})
		if got := counts(nextRange(t, s, 8192*6)); !slices.Equal(got, []uint64{2 * 8192, 2 * 8192, 2 * 8192}) {
			t.Fatalf("counts %v", got)
		}
	})
	t.Run("sequence above the node fields", func(t *testing.T) {
		s := newNoopService(NoopOptions{Layout: "sonyflake"})
		if got := counts(nextRange(t, s, 5)); !slices.Equal(got, []uint64{1, 1, 1, 1, 1}) {
			t.Fatalf("counts %v", got)
		}
	})
	t.Run("duplicate", func(t *testing.T) {
		resp, err := newNoopService(NoopOptions{DuplicateAt: 20}).NextRange(context.Background(), &firnv1.NextRangeRequest{Count: 30})
		if err != nil {
			t.Fatal(err)
		}
		var set intervals.Set
		var dups uint64
		for _, r := range resp.GetRuns() {
			dups += set.Add(r.GetFirst(), r.GetCount())
		}
		if dups != 1 || set.Contains(20) || set.Len() != 29 {
			t.Fatalf("runs %v: %d duplicates", resp.GetRuns(), dups)
		}
	})
	t.Run("bounds", func(t *testing.T) {
		s := newNoopService(NoopOptions{MaxRange: 100})
		for _, n := range []uint64{0, 101} {
			_, err := s.NextRange(context.Background(), &firnv1.NextRangeRequest{Count: n})
			if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "max_range") {
				t.Fatalf("count %d: %v", n, err)
			}
		}
	})
	t.Run("segment", func(t *testing.T) {
		// A segment generator's take is one run, whatever its size.
		s := newNoopService(NoopOptions{Kind: kindSegment, Name: "orders", Layout: "segment,start=1,max=99999999"})
		for _, n := range []uint64{1, 4097, 1 << 20} {
			if rs := nextRange(t, s, n); len(rs) != 1 {
				t.Fatalf("count %d: runs %v, want one", n, rs)
			}
		}
		rs := nextRange(t, s, 3)
		if rs[0].GetFirst() != 1+1+4097+1<<20 {
			t.Fatalf("runs %v: not where the counter stood", rs)
		}
		info, err := s.Info(context.Background(), nil)
		if err != nil {
			t.Fatal(err)
		}
		g := info.GetGenerators()[0]
		if g.GetName() != "orders" || g.GetKind() != kindSegment || g.GetLayout() != "segment,start=1,max=99999999" ||
			len(g.GetWorkers()) != 0 || g.GetMaxRange() != defaultNoopMaxRange {
			t.Fatalf("info %v", g)
		}
		if w, c := capacity(g); w != 1 || c != 0 {
			t.Fatalf("capacity %d workers, %.0f IDs/s; want 1 and none", w, c)
		}
		if args := strings.Join(noopMirror(g), " "); args != "--kind segment --layout segment,start=1,max=99999999 --max-range 16777216" {
			t.Fatalf("mirror %q", args)
		}
		// The generator is "orders": calls naming it or none are served.
		for name, want := range map[string]codes.Code{"": codes.OK, "orders": codes.OK, "default": codes.NotFound} {
			if _, err := s.NextID(context.Background(), &firnv1.NextIDRequest{Generator: name}); status.Code(err) != want {
				t.Fatalf("NextID of generator %q: %v, want %v", name, err, want)
			}
		}
	})
	t.Run("segment duplicate", func(t *testing.T) {
		resp, err := newNoopService(NoopOptions{Kind: kindSegment, DuplicateAt: 20}).NextRange(context.Background(), &firnv1.NextRangeRequest{Count: 30})
		if err != nil {
			t.Fatal(err)
		}
		var set intervals.Set
		var dups uint64
		for _, r := range resp.GetRuns() {
			dups += set.Add(r.GetFirst(), r.GetCount())
		}
		if dups != 1 || set.Contains(20) || set.Len() != 29 {
			t.Fatalf("runs %v: %d duplicates", resp.GetRuns(), dups)
		}
	})
	t.Run("info", func(t *testing.T) {
		info, err := newNoopService(NoopOptions{Layout: "snowflake", Workers: []uint32{39, 40}, MaxRange: 99}).Info(context.Background(), nil)
		if err != nil {
			t.Fatal(err)
		}
		g := info.GetGenerators()[0]
		if g.GetLayout() != "snowflake" || !slices.Equal(g.GetWorkers(), []uint32{39, 40}) || g.GetDatacenter() != 1 || g.GetWorker() != 7 ||
			g.GetWorkersWanted() != 2 || g.GetMaxRange() != 99 {
			t.Fatalf("info %v", g)
		}
		if w, c := capacity(g); w != 2 || c != 2*4_096_000 {
			t.Fatalf("capacity %d workers, %.0f IDs/s", w, c)
		}
		if args := strings.Join(noopMirror(g), " "); args != "--workers 39,40 --layout snowflake --max-range 99" {
			t.Fatalf("mirror %q", args)
		}
	})
}

func TestNoopMainRefusesRangeFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--layout", "bogus"}, "--layout"},
		{[]string{"--workers", "3,2"}, "not ascending"},
		{[]string{"--workers", "x"}, "not a worker ID"},
		{[]string{"--max-range", "0"}, "--max-range"},
		{[]string{"--kind", "counter"}, "--kind \"counter\""},
		{[]string{"--kind", "segment", "--layout", "snowflake"}, "a segment generator's definition"},
		{[]string{"--generator", ""}, "--generator is empty"},
	} {
		var stderr bytes.Buffer
		if code := NoopMain(tc.args, &bytes.Buffer{}, &stderr); code != 2 || !strings.Contains(stderr.String(), tc.want) {
			t.Errorf("NoopMain(%v) = %d %q, want 2 and %q", tc.args, code, stderr.String(), tc.want)
		}
	}
}
