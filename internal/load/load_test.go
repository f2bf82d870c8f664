package load

import (
	"bytes"
	"encoding/json"
	"io"
	"math"
	"net"
	"os"
	"os/exec"
	"runtime"
	"runtime/metrics"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestMain makes the test binary the no-op server when re-executed as
// `<test binary> __bench-noop ...`, as `--target noop` does with
// os.Args[0].
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == NoopCommand {
		os.Exit(NoopMain(os.Args[2:], os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

// short are the flags that keep a run brief.
var short = []string{"--duration", "300ms", "--warmup", "100ms", "--quiet", "--json", "--record", "1000000"}

// bench runs Main and decodes its JSON report.
func bench(t *testing.T, wantCode int, args ...string) *Report {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := Main(append(append([]string{}, short...), args...), &stdout, &stderr)
	if code != wantCode {
		t.Fatalf("Main(%v) = %d, want %d; stderr:\n%s", args, code, wantCode, stderr.String())
	}
	var rep Report
	dec := json.NewDecoder(&stdout)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&rep); err != nil {
		t.Fatalf("report is not the JSON shape: %v\n%s", err, stdout.String())
	}
	return &rep
}

func checkRun(t *testing.T, r *Result, idsPerCall uint64) {
	t.Helper()
	if r == nil {
		t.Fatal("no run in the report")
	}
	if r.Calls == 0 || r.Seconds <= 0 {
		t.Fatalf("run made %d calls in %.3fs", r.Calls, r.Seconds)
	}
	if idsPerCall > 0 && r.IDs != idsPerCall*r.Calls {
		t.Fatalf("%d IDs from %d calls, want %d per call", r.IDs, r.Calls, idsPerCall)
	}
	if len(r.Errors) != 0 {
		t.Fatalf("errors %v", r.Errors)
	}
	if r.Dups != 0 {
		t.Fatalf("%d duplicates from the no-op counter", r.Dups)
	}
	if r.Checked == 0 || r.Checked > r.IDs {
		t.Fatalf("checked %d of %d IDs", r.Checked, r.IDs)
	}
	l := r.Latency
	if l.Samples == 0 || l.P50 <= 0 || l.P50 > l.P90 || l.P90 > l.P99 || l.P99 > l.P999 || l.P999 > l.Max {
		t.Fatalf("latency percentiles out of order: %+v", l)
	}
	if got := float64(r.IDs) / r.Seconds; got != r.IDsPS {
		t.Fatalf("ids/s %.1f, want IDs/seconds = %.1f", r.IDsPS, got)
	}
}

func TestNoopUnary(t *testing.T) {
	rep := bench(t, exitOK, "--target", "noop", "--callers", "4", "--conns", "2")
	r := rep.Run
	checkRun(t, r, 1)
	if r.Mode != modeUnary || r.Callers != 4 || r.Conns != 2 || r.Label != "noop" {
		t.Fatalf("run %+v", r)
	}
	if r.RPCs != r.Calls || r.Checked != r.IDs || r.Latency.Samples != r.Calls {
		t.Fatalf("unary run: %d RPCs, %d calls, %d checked, %d samples", r.RPCs, r.Calls, r.Checked, r.Latency.Samples)
	}
}

func TestNoopBatch(t *testing.T) {
	rep := bench(t, exitOK, "--target", "noop", "--mode", "batch", "--batch", "100", "--callers", "2")
	checkRun(t, rep.Run, 100)
	if rep.Run.Batch != 100 {
		t.Fatalf("batch %d", rep.Run.Batch)
	}
}

func TestNoopPrefetch(t *testing.T) {
	rep := bench(t, exitOK, "--target", "noop", "--mode", "prefetch", "--callers", "2")
	r := rep.Run
	checkRun(t, r, 1)
	if r.RPCs == 0 || r.RPCs >= r.IDs {
		t.Fatalf("prefetch: %d RPCs for %d IDs", r.RPCs, r.IDs)
	}
}

// TestDuplicateDetected: the no-op server hands out one ID twice; the run
// finds exactly that one and exits with exitDuplicate.
func TestDuplicateDetected(t *testing.T) {
	for _, mode := range []string{modeUnary, modeBatch, modeRanges} {
		t.Run(mode, func(t *testing.T) {
			rep := bench(t, exitDuplicate, "--target", "noop", "--mode", mode, "--batch", "10",
				"--warmup", "0s", "--noop-duplicate-at", "20")
			if rep.Run.Dups != 1 {
				t.Fatalf("found %d duplicates, want the 1 injected", rep.Run.Dups)
			}
			// The injected ID breaks NextRange's order as well.
			if mode == modeRanges && rep.Run.Malformed != 1 {
				t.Fatalf("%d malformed responses, want the 1 injected", rep.Run.Malformed)
			}
		})
	}
}

func TestCountDuplicates(t *testing.T) {
	for _, tc := range []struct {
		ids  []uint64
		want uint64
	}{
		{nil, 0}, {[]uint64{1}, 0}, {[]uint64{3, 1, 2}, 0}, {[]uint64{5, 1, 5}, 1}, {[]uint64{7, 7, 7, 1, 1}, 3},
	} {
		if got := countDuplicates(append([]uint64{}, tc.ids...)); got != tc.want {
			t.Errorf("countDuplicates(%v) = %d, want %d", tc.ids, got, tc.want)
		}
	}
}

// startInProcessNoop serves the no-op API in this process (as a stand-in
// node) until the test ends.
func startInProcessNoop(t *testing.T, tlsFiles ...string) string {
	t.Helper()
	var cert, key, ca string
	if len(tlsFiles) == 3 {
		cert, key, ca = tlsFiles[0], tlsFiles[1], tlsFiles[2]
	}
	cfg, err := serverTLS(cert, key, ca)
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := NewNoopServer(cfg, NoopOptions{Base: 1 << 40})
	done := make(chan struct{})
	go func() { defer close(done); srv.Serve(lis) }()
	t.Cleanup(func() { srv.Stop(); <-done })
	return lis.Addr().String()
}

func TestCompare(t *testing.T) {
	addr := startInProcessNoop(t)
	rep := bench(t, exitOK, "--target", addr, "--compare", "noop", "--pairs", "5",
		"--duration", "150ms", "--warmup", "50ms", "--callers", "2")
	c := rep.Compare
	if c == nil || len(c.Pairs) != 5 {
		t.Fatalf("compare: %+v", c)
	}
	var rpc []float64
	for i, p := range c.Pairs {
		checkRun(t, p.Node, 1)
		checkRun(t, p.Noop, 1)
		if p.Node.Target != addr || p.Noop.Target == addr {
			t.Fatalf("pair %d: node %s, noop %s", i, p.Node.Target, p.Noop.Target)
		}
		if want := p.Node.RPCPS / p.Noop.RPCPS; p.Ratios.RPC != want {
			t.Fatalf("pair %d ratio %.3f, want %.3f", i, p.Ratios.RPC, want)
		}
		// The node here is this process (found by its port), the noop
		// the child: both report their CPU.
		if p.Node.ServerCPU == nil || p.Node.ServerCPU.PID != os.Getpid() || p.Noop.ServerCPU == nil || p.Noop.ServerCPU.PID == os.Getpid() {
			t.Fatalf("pair %d: server cpu node %+v, noop %+v", i, p.Node.ServerCPU, p.Noop.ServerCPU)
		}
		rpc = append(rpc, p.Ratios.RPC)
	}
	if c.Median.RPC != median(rpc) || c.Median.RPC <= 0 {
		t.Fatalf("median %.3f of %v", c.Median.RPC, rpc)
	}
}

// --target noop --compare noop: the target is a second no-op server (a
// self check). The pairs run in alternating order, and the report gives
// where the medians lie from the pairs' spread.
func TestCompareSelfCheck(t *testing.T) {
	var stdout, stderr bytes.Buffer
	args := append(append([]string{}, short...), "--quiet=false", "--target", "noop", "--compare", "noop", "--pairs", "5", "--callers", "2")
	if code := Main(args, &stdout, &stderr); code != exitOK {
		t.Fatalf("Main(%v) = %d; stderr:\n%s", args, code, stderr.String())
	}
	var rep Report
	if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
		t.Fatal(err)
	}
	c := rep.Compare
	if c == nil || len(c.Pairs) != 5 || !c.SelfCheck {
		t.Fatalf("compare: %+v", c)
	}
	var rpc, cpu []float64
	for i, p := range c.Pairs {
		checkRun(t, p.Node, 1)
		checkRun(t, p.Noop, 1)
		if p.Node.Target == p.Noop.Target || p.Node.ServerCPU == nil || p.Noop.ServerCPU == nil ||
			p.Node.ServerCPU.PID == p.Noop.ServerCPU.PID || p.Node.ServerCPU.PID == os.Getpid() {
			t.Fatalf("pair %d: the target and the floor are not two no-op servers: %+v %+v", i+1, p.Node, p.Noop)
		}
		rpc, cpu = append(rpc, p.Ratios.RPC), append(cpu, p.Ratios.CPUPerCall)
	}
	// 5 pairs: between the smallest and the largest, 1 − 2/32 of the time.
	in := c.Interval
	if in.Confidence != 0.9375 || in.RPC != [2]float64{slices.Min(rpc), slices.Max(rpc)} || in.CPUPerCall != [2]float64{slices.Min(cpu), slices.Max(cpu)} {
		t.Fatalf("interval %+v for ratios rpc %v, cpu %v", in, rpc, cpu)
	}
	// The order of the runs, from the progress lines: node first in the
	// odd pairs, the no-op first in the even ones.
	var order []string
	for _, l := range strings.Split(stderr.String(), "\n") {
		if f := strings.Fields(l); len(f) > 2 && f[0] == "bench:" && (f[1] == "node" || f[1] == "noop") {
			if k := f[1] + " " + f[2]; len(order) == 0 || order[len(order)-1] != k {
				order = append(order, k)
			}
		}
	}
	want := []string{"node 1/5", "noop 1/5", "noop 2/5", "node 2/5", "node 3/5", "noop 3/5", "noop 4/5", "node 4/5", "node 5/5", "noop 5/5"}
	if !slices.Equal(order, want) {
		t.Fatalf("runs in the order %v, want %v", order, want)
	}
}

// orderRank: the widest interval of order statistics that still holds the
// median with 90 %, for n pairs.
func TestOrderRank(t *testing.T) {
	for _, tc := range []struct {
		n    int
		k    int
		conf float64
	}{
		{4, 0, 0},                  // even [min, max] holds it 7/8 of the time
		{5, 1, 1 - 2.0/32},         // [min, max]
		{7, 1, 1 - 2.0/128},        // k 2 would be 1 − 16/128 = 0.875
		{9, 2, 1 - 2*10.0/512},     // k 3: 1 − 92/512 = 0.82
		{15, 4, 1 - 2*576.0/32768}, // k 5: 0.88
		{25, 8, 1 - 2*(1+25+300+2300+12650+53130+177100+480700)/33554432.0},
	} {
		k, conf := orderRank(tc.n)
		if k != tc.k || math.Abs(conf-tc.conf) > 1e-12 {
			t.Errorf("orderRank(%d) = %d, %.6f; want %d, %.6f", tc.n, k, conf, tc.k, tc.conf)
		}
	}
}

func TestMedian(t *testing.T) {
	for _, tc := range []struct {
		v    []float64
		want float64
	}{{nil, 0}, {[]float64{3}, 3}, {[]float64{5, 1, 3}, 3}, {[]float64{4, 1, 3, 2}, 2.5}, {[]float64{9, 1, 1, 9, 5}, 5}} {
		if got := median(tc.v); got != tc.want {
			t.Errorf("median(%v) = %v, want %v", tc.v, got, tc.want)
		}
	}
}

// TestIdleFindsPIDByPort: --idle on an address finds the process that
// listens there and reads its CPU and RSS.
func TestIdleFindsPIDByPort(t *testing.T) {
	child, err := startNoopChild(nil, os.Stderr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(child.stop)
	rep := bench(t, exitOK, "--target", child.addr, "--idle", "1200ms")
	i := rep.Idle
	if i == nil || i.PID != child.pid() {
		t.Fatalf("idle %+v, want pid %d", i, child.pid())
	}
	if i.RSSMaxBytes < 1<<20 || i.RSSEndBytes < 1<<20 || i.RSSEndBytes > i.RSSMaxBytes {
		t.Fatalf("rss %+v", i)
	}
	if i.Seconds < 1.2 || i.CPUPercent < 0 || i.CPUPercent > 100 {
		t.Fatalf("idle %+v", i)
	}
}

// The no-op server's --heap is its live heap in all: what it holds live
// by itself counts, and it holds the rest. Holding all of --heap on top of
// its own (which, like the node's, counts the binary's package state) let
// it collect less often per call than the node it is compared with.
func TestNoopHeapCountsItsOwn(t *testing.T) {
	liveHeap := func() int64 {
		runtime.GC()
		s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
		metrics.Read(s)
		return int64(s[0].Value.Uint64())
	}
	// A heap of its own, as a server's: 8 MiB in 1,024 blocks.
	own := make([][]byte, 1024)
	for i := range own {
		own[i] = make([]byte, 8<<10)
	}
	t.Cleanup(func() { noopBallast = nil })
	const total = 24 << 20
	gotOwn, held := holdHeap(total)
	if gotOwn < 8<<20 || gotOwn+held != total {
		t.Fatalf("holdHeap(%d): own %d, held %d; want own at least the 8 MiB held by the test, and the two making the total", total, gotOwn, held)
	}
	if live := liveHeap(); live < total-1<<20 || live > total+1<<20 {
		t.Fatalf("live heap %d after holdHeap(%d), want it within 1 MiB of that", live, int64(total))
	}
	runtime.KeepAlive(own)
	if gotOwn, held := holdHeap(1 << 20); held != 0 || gotOwn < 8<<20 {
		t.Fatalf("holdHeap(1 MiB) under 8 MiB of its own: own %d, held %d; want nothing held", gotOwn, held)
	}
	runtime.KeepAlive(own)

	// The child says what it holds, and the report shows it.
	child, err := startNoopChild([]string{"--heap", strconv.Itoa(total)}, os.Stderr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(child.stop)
	if child.own <= 0 || child.own >= total {
		t.Fatalf("the no-op child reported its own live heap as %d, want in (0, %d)", child.own, total)
	}
}

func TestIdleNoop(t *testing.T) {
	rep := bench(t, exitOK, "--target", "noop", "--idle", "500ms")
	if rep.Idle == nil || rep.Idle.PID == os.Getpid() || rep.Idle.PID == 0 {
		t.Fatalf("idle %+v", rep.Idle)
	}
}

func TestProcCPUCountsWork(t *testing.T) {
	before, err := procCPU(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	// Burn a little CPU (bounded by work, not time).
	x := uint64(1)
	for i := range 200_000_000 {
		x = x*6364136223846793005 + uint64(i)
	}
	after, err := procCPU(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if after <= before {
		t.Fatalf("CPU ticks %d then %d after busy work (%d)", before, after, x&1)
	}
}

// TestPin: --pin runs, says what it pinned, and gives the load process
// its CPUs back afterwards.
func TestPin(t *testing.T) {
	var before unix.CPUSet
	if err := unix.SchedGetaffinity(0, &before); err != nil {
		t.Fatal(err)
	}
	rep := bench(t, exitOK, "--target", "noop", "--pin")
	checkRun(t, rep.Run, 1)
	if before.Count() >= 2 && !strings.HasPrefix(rep.Pin, "pinned: server on CPU") {
		t.Fatalf("pin note %q with %d CPUs", rep.Pin, before.Count())
	}
	var after unix.CPUSet
	if err := unix.SchedGetaffinity(0, &after); err != nil {
		t.Fatal(err)
	}
	if after != before {
		t.Fatalf("affinity %v after the run, was %v", after, before)
	}
}

// TestPinRestoresTheNode: the node --pin put on one CPU gets its CPUs
// back when the run ends. Before, it stayed pinned, and every later
// unpinned measurement of it ran on one CPU.
func TestPinRestoresTheNode(t *testing.T) {
	var before unix.CPUSet
	if err := unix.SchedGetaffinity(0, &before); err != nil {
		t.Fatal(err)
	}
	if before.Count() < 2 {
		t.Fatalf("this test needs 2 CPUs to pin anything; the machine gives %d", before.Count())
	}
	node := exec.Command("sleep", "60") // stands for the node's process
	if err := node.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { node.Process.Kill(); node.Wait() })
	addr := startInProcessNoop(t)
	rep := bench(t, exitOK, "--target", addr, "--pid", strconv.Itoa(node.Process.Pid), "--pin")
	if !strings.HasPrefix(rep.Pin, "pinned: server on CPU") || strings.Contains(rep.Pin, "not pinned") {
		t.Fatalf("pin note %q", rep.Pin)
	}
	var after unix.CPUSet
	if err := unix.SchedGetaffinity(node.Process.Pid, &after); err != nil {
		t.Fatal(err)
	}
	if after != before {
		t.Fatalf("the node's affinity %v after the run, was %v", after, before)
	}
}

func TestTLS(t *testing.T) {
	t.Run("noop mtls", func(t *testing.T) {
		checkRun(t, bench(t, exitOK, "--target", "noop", "--noop-tls", "mtls").Run, 1)
	})
	t.Run("node mtls", func(t *testing.T) {
		pki, err := newEphemeralPKI()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(pki.remove)
		addr := startInProcessNoop(t, pki.ServerCert, pki.ServerKey, pki.CA)
		rep := bench(t, exitOK, "--target", addr, "--tls-ca", pki.CA, "--tls-cert", pki.ClientCert, "--tls-key", pki.ClientKey)
		checkRun(t, rep.Run, 1)
		// Without the client certificate every call fails.
		var stdout, stderr bytes.Buffer
		if code := Main(append(append([]string{}, short...), "--target", addr, "--tls-ca", pki.CA), &stdout, &stderr); code != exitFailed {
			t.Fatalf("mTLS without a client certificate: exit %d, stderr %s", code, stderr.String())
		}
	})
}

func TestFlagsRefused(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--mode", "stream"}, "--mode \"stream\": want unary, batch, prefetch, ranges, seq or seqs"},
		{[]string{"--batch", "0"}, "--batch 0 outside [1, 1000000] (NextIDs' count)"},
		{[]string{"--mode", "ranges", "--batch", "0"}, "--batch 0 outside [1, 1099511627776] (NextRange's count"},
		{[]string{"--mode", "ranges", "--batch", "1099511627777"}, "--batch 1099511627777 outside [1, 1099511627776]"},
		{[]string{"--callers", "0"}, "--callers 0 outside [1, 10000]"},
		{[]string{"--conns", "0"}, "--conns 0 outside [1, 1000]"},
		{[]string{"--duration", "0s"}, "--duration 0s must be positive"},
		{[]string{"--compare", "noop", "--target", "127.0.0.1:1", "--pairs", "3"}, "--pairs 3 below 5"},
		{[]string{"--compare", "etcd"}, "--compare \"etcd\""},
		{[]string{"--target", "nowhere"}, "--target \"nowhere\""},
		{[]string{"--tls-cert", "a.pem"}, "--tls-cert and --tls-key go together"},
		{[]string{"--noop-tls", "maybe"}, "--noop-tls \"maybe\""},
		{[]string{"--target", "noop", "--node-metrics", "http://127.0.0.1:1/metrics"}, "--node-metrics needs a node --target"},
		{[]string{"--target", "127.0.0.1:1", "--node-metrics", "127.0.0.1:1"}, "want a URL"},
		{[]string{"extra"}, "unexpected argument \"extra\""},
	} {
		var stdout, stderr bytes.Buffer
		if code := Main(tc.args, &stdout, &stderr); code != exitUsage {
			t.Errorf("Main(%v) = %d, want %d", tc.args, code, exitUsage)
			continue
		}
		if !strings.Contains(stderr.String(), tc.want) {
			t.Errorf("Main(%v) said %q, want %q", tc.args, stderr.String(), tc.want)
		}
	}
}

func TestNoopMainRefusesRemoteListen(t *testing.T) {
	var stderr bytes.Buffer
	if code := NoopMain([]string{"--listen", "0.0.0.0:0"}, io.Discard, &stderr); code != 2 || !strings.Contains(stderr.String(), "not a loopback") {
		t.Fatalf("NoopMain on 0.0.0.0: %d %q", code, stderr.String())
	}
}

func TestHist(t *testing.T) {
	var h hist
	for v := int64(1); v <= 100_000; v++ {
		h.record(v * 1000) // 1µs .. 100ms, uniform
	}
	for _, tc := range []struct {
		q    float64
		want int64
	}{{0.5, 50_000_000}, {0.9, 90_000_000}, {0.99, 99_000_000}, {0.999, 99_900_000}} {
		got := h.quantile(tc.q)
		if d := float64(got-tc.want) / float64(tc.want); d < -0.02 || d > 0.02 {
			t.Errorf("quantile(%v) = %d, want %d ±2%%", tc.q, got, tc.want)
		}
	}
	if h.max != 100_000_000 || h.total != 100_000 {
		t.Fatalf("max %d total %d", h.max, h.total)
	}
	for v := range int64(5000) {
		if lo := histLow(histIndex(v)); lo > v || histLow(histIndex(v)+1) <= v {
			t.Fatalf("value %d outside its bucket [%d, %d)", v, lo, histLow(histIndex(v)+1))
		}
	}
	for _, v := range []int64{1 << 20, 1<<40 + 12345, 1<<62 + 1} {
		if lo := histLow(histIndex(v)); lo > v || histLow(histIndex(v)+1) <= v {
			t.Fatalf("value %d outside its bucket", v)
		}
	}
}

// TestProcSwitchesCountsWakeups: a hundred sleeps are a hundred wake-ups
// of some thread of this process, which procSwitches counts.
func TestProcSwitchesCountsWakeups(t *testing.T) {
	before, err := procSwitches(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	for range 100 {
		time.Sleep(time.Millisecond)
	}
	after, err := procSwitches(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if after-before < 100 {
		t.Fatalf("%d context switches over 100 sleeps, want at least 100", after-before)
	}
}
