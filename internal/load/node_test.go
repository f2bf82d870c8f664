package load

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/firnid/firn/client"
	"github.com/firnid/firn/internal/testing/freeport"
)

func freePort(t *testing.T) string {
	t.Helper()
	return strconv.Itoa(freeport.Port(t))
}

// startFirnNode builds cmd/firn, runs `firn serve` on its embedded
// coordinator with loopback listeners on free ports (and the extra
// flags), and waits until it serves. The test kills it at the end.
func startFirnNode(t *testing.T, extra ...string) (addr string, pid int) {
	t.Helper()
	addr, _, pid = startFirnNodeHTTP(t, extra...)
	return addr, pid
}

// startFirnNodeHTTP is startFirnNode, also returning the node's HTTP
// address.
func startFirnNodeHTTP(t *testing.T, extra ...string) (addr, httpAddr string, pid int) {
	t.Helper()
	dir := t.TempDir()
	bin := filepath.Join(dir, "firn")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/firnid/firn/cmd/firn").CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/firn: %v\n%s", err, out)
	}
	addr = "127.0.0.1:" + freePort(t)
	logPath := filepath.Join(dir, "node.log")
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	httpAddr = "127.0.0.1:" + freePort(t)
	cmd := exec.Command(bin, append([]string{"serve", "--data-dir", filepath.Join(dir, "data"), "--grpc-addr", addr,
		"--http-addr", httpAddr, "--embedded-client-addr", "127.0.0.1:" + freePort(t),
		"--embedded-peer-addr", "127.0.0.1:" + freePort(t)}, extra...)...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); logf.Close(); close(done) }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-done
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			t.Logf("node log:\n%s", b)
		}
	})
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	hc := healthpb.NewHealthClient(conn)
	// Serving means every generator serves, not the default alone: a
	// sequence generator serves once its sections are taken, which may
	// come after the default.
	services := []string{""}
	for i, a := range extra {
		if a == "--generator" && i+1 < len(extra) {
			name, _, _ := strings.Cut(extra[i+1], "=")
			services = append(services, name)
		}
	}
	deadline := time.After(60 * time.Second)
	for {
		for len(services) > 0 {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			resp, err := hc.Check(ctx, &healthpb.HealthCheckRequest{Service: services[0]})
			cancel()
			if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
				break
			}
			services = services[1:]
		}
		if len(services) == 0 {
			return addr, httpAddr, cmd.Process.Pid
		}
		select {
		case <-done:
			b, _ := os.ReadFile(logPath)
			t.Fatalf("node exited before serving:\n%s", b)
		case <-deadline:
			t.Fatal("node not serving after 60s")
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// TestAgainstRealNode drives a real firn node process in each mode, then
// node-versus-noop pairs, then an idle window whose PID is found by port.
func TestAgainstRealNode(t *testing.T) {
	addr, pid := startFirnNode(t)
	t.Run("unary", func(t *testing.T) {
		checkRun(t, bench(t, exitOK, "--target", addr, "--callers", "4", "--conns", "2").Run, 1)
	})
	t.Run("batch", func(t *testing.T) {
		checkRun(t, bench(t, exitOK, "--target", addr, "--mode", "batch", "--batch", "1000", "--callers", "2").Run, 1000)
	})
	t.Run("prefetch", func(t *testing.T) {
		r := bench(t, exitOK, "--target", addr, "--mode", "prefetch", "--callers", "2").Run
		checkRun(t, r, 1)
		// snowflake's limit is 4,096 IDs per ms: the window's IDs are at
		// most that over the window and the lead the node may issue
		// ahead of its clock, plus what the clients' buffers held when it
		// opened (a refill each, at most DefaultMaxBatch, and the one in
		// flight). A 300 ms window shows the lead: the rate alone is not
		// the bound.
		g, err := generatorInfo(context.Background(), addr, nil, "")
		if err != nil {
			t.Fatal(err)
		}
		buffered := float64(r.Conns * 2 * client.DefaultMaxBatch)
		if most := 4_096_000*(r.Seconds+g.GetMaxLead().AsDuration().Seconds())*1.01 + buffered; float64(r.IDs) > most {
			t.Fatalf("%d IDs in %.2fs from a snowflake node: above its limit over the window and its max lead %v (%.0f)",
				r.IDs, r.Seconds, g.GetMaxLead().AsDuration(), most)
		}
	})
	t.Run("ranges", func(t *testing.T) {
		g, err := generatorInfo(context.Background(), addr, nil, "")
		if err != nil {
			t.Fatal(err)
		}
		if g.GetMaxRange() == 0 {
			t.Fatal("the node reports no max_range: this build serves NextRange, so its Info must say how much")
		}
		workers, capacity := capacity(g)
		r := bench(t, exitOK, "--target", addr, "--mode", "ranges", "--batch", "10000", "--callers", "2").Run
		checkRanges(t, r, 10000, workers, capacity)
		// Above the capacity only by what the lead lets the node issue
		// ahead of its clock.
		if most := capacity * (r.Seconds + g.GetMaxLead().AsDuration().Seconds()) * 1.01; float64(r.IDs) > most {
			t.Fatalf("%d IDs in %.2fs from a node of capacity %.0f IDs/s (max lead %v)", r.IDs, r.Seconds, capacity, g.GetMaxLead().AsDuration())
		}
	})
	t.Run("compare", func(t *testing.T) {
		c := bench(t, exitOK, "--target", addr, "--compare", "noop", "--duration", "150ms", "--warmup", "50ms").Compare
		if c == nil || len(c.Pairs) != minPairs || c.Median.RPC <= 0 {
			t.Fatalf("compare %+v", c)
		}
	})
	t.Run("idle", func(t *testing.T) {
		i := bench(t, exitOK, "--target", addr, "--idle", "1s").Idle
		if i == nil || i.PID != pid || i.RSSMaxBytes < 1<<20 {
			t.Fatalf("idle %+v, want pid %d", i, pid)
		}
	})
}

// TestAgainstRealSegmentNode drives a segment generator of a real node
// (beside a snowflake default) in unary and ranges mode, alone and
// against the no-op floor shaped as a segment generator, with the same
// duplicate checks as the snowflake runs: a duplicate fails the run
// (exitDuplicate), so it fails this test. The node's counter writes are
// read from its /metrics.
func TestAgainstRealSegmentNode(t *testing.T) {
	addr, httpAddr, pid := startFirnNodeHTTP(t, "--generator", "default=snowflake", "--generator", "orders=segment")
	metrics := "http://" + httpAddr + "/metrics"
	g, err := generatorInfo(context.Background(), addr, nil, "orders")
	if err != nil {
		t.Fatal(err)
	}
	if g.GetKind() != kindSegment || g.GetMaxRange() == 0 {
		t.Fatalf("generator orders: kind %q, max_range %d; want a segment generator serving NextRange", g.GetKind(), g.GetMaxRange())
	}
	seg := []string{"--target", addr, "--generator", "orders", "--node-metrics", metrics}
	checkNode := func(t *testing.T, r *Result) {
		t.Helper()
		if c := r.ServerCPU; c == nil || c.PID != pid || c.CPUSeconds < 0 {
			t.Fatalf("server cpu %+v, want the node's (pid %d)", c, pid)
		}
		cw := r.CounterWrites
		if cw == nil || cw.Generator != "orders" || cw.Step == 0 || (cw.Claims == 0) != (cw.ClaimedIDs == 0) {
			t.Fatalf("counter writes %+v", cw)
		}
		if want := float64(cw.Claims) / r.Seconds; cw.PerSecond != want {
			t.Fatalf("counter writes %.3f/s, want claims/seconds = %.3f", cw.PerSecond, want)
		}
	}
	t.Run("unary", func(t *testing.T) {
		r := bench(t, exitOK, append(seg, "--callers", "4", "--conns", "2")...).Run
		checkRun(t, r, 1)
		checkNode(t, r)
		if r.Kind != kindSegment || r.Checked != r.IDs {
			t.Fatalf("kind %q, %d of %d IDs checked", r.Kind, r.Checked, r.IDs)
		}
	})
	t.Run("ranges", func(t *testing.T) {
		r := bench(t, exitOK, append(seg, "--mode", "ranges", "--batch", "100000", "--callers", "2")...).Run
		checkRanges(t, r, 100000, 1, 0)
		checkNode(t, r)
		if r.Kind != kindSegment {
			t.Fatalf("kind %q", r.Kind)
		}
		// A claim covers the take that waits for it: some window's
		// claims hold at least the IDs of one call.
		if c := r.CounterWrites; c.Claims > 0 && c.ClaimedIDs < 100000 {
			t.Fatalf("%d claims of %d IDs in all, below one call's count", c.Claims, c.ClaimedIDs)
		}
	})
	t.Run("prefetch", func(t *testing.T) {
		// The Go client's Next: its refills are NextRange calls of the
		// segment generator.
		r := bench(t, exitOK, append(seg, "--mode", "prefetch", "--callers", "2")...).Run
		checkRun(t, r, 1)
		checkNode(t, r)
		if r.RPCs == 0 || r.RPCs >= r.IDs {
			t.Fatalf("prefetch: %d RPCs for %d IDs", r.RPCs, r.IDs)
		}
	})
	t.Run("compare unary", func(t *testing.T) {
		c := bench(t, exitOK, append(seg, "--compare", "noop", "--callers", "4", "--duration", "150ms", "--warmup", "50ms")...).Compare
		if c == nil || len(c.Pairs) != minPairs || c.Median.RPC <= 0 || c.Median.CPUPerCall <= 0 {
			t.Fatalf("compare %+v", c)
		}
		for _, p := range c.Pairs {
			checkRun(t, p.Node, 1)
			checkRun(t, p.Noop, 1)
			checkNode(t, p.Node)
			if p.Noop.ServerCPU == nil || p.Noop.CounterWrites != nil {
				t.Fatalf("noop run: server cpu %+v, counter writes %+v", p.Noop.ServerCPU, p.Noop.CounterWrites)
			}
		}
	})
	t.Run("compare ranges", func(t *testing.T) {
		c := bench(t, exitOK, append(seg, "--compare", "noop", "--mode", "ranges", "--batch", "100000", "--callers", "2",
			"--duration", "150ms", "--warmup", "50ms")...).Compare
		if c == nil || len(c.Pairs) != minPairs || c.Median.IDs <= 0 {
			t.Fatalf("compare %+v", c)
		}
		for _, p := range c.Pairs {
			checkRanges(t, p.Node, 100000, 1, 0)
			checkRanges(t, p.Noop, 100000, 1, 0)
			checkNode(t, p.Node)
			if p.Noop.Kind != kindSegment {
				t.Fatalf("the noop's generator is of kind %q, want it shaped as the node's segment generator", p.Noop.Kind)
			}
		}
	})
	t.Run("duplicate found", func(t *testing.T) {
		// The floor, shaped as the segment generator, hands out one ID
		// twice: the pair's check finds it and the run fails.
		for _, mode := range []string{modeUnary, modeRanges} {
			rep := bench(t, exitDuplicate, append(seg, "--compare", "noop", "--mode", mode, "--batch", "10",
				"--duration", "100ms", "--warmup", "0s", "--noop-duplicate-at", "20")...)
			if d := rep.duplicates(); d != 1 {
				t.Fatalf("%s: %d duplicates, want the 1 injected", mode, d)
			}
		}
	})
}

// TestAgainstRealSeqNode drives a real node's sequence generator (beside
// a snowflake default): NextSeq for about a second and NextSeqs on zipf
// keys, every response through the per-key checker (a violation exits 3
// and fails the test), routed by the node's section map (one node: no
// WRONG_NODE refusal), with the node's writes from its /metrics; then
// node/noop pairs, and a sequence mode against the snowflake generator
// refused.
func TestAgainstRealSeqNode(t *testing.T) {
	addr, httpAddr, pid := startFirnNodeHTTP(t, "--generator", "default=snowflake", "--generator", "chats=seq")
	metrics := "http://" + httpAddr + "/metrics"
	g, err := generatorInfo(context.Background(), addr, nil, "chats")
	if err != nil {
		t.Fatal(err)
	}
	if g.GetKind() != kindSeq || g.GetSections() != 64 {
		t.Fatalf("generator chats: kind %q, sections %d; want a sequence generator of 64 sections", g.GetKind(), g.GetSections())
	}
	sq := append([]string{"--target", addr, "--generator", "chats", "--node-metrics", metrics}, seqShort...)
	check := func(t *testing.T, r *Result, node bool) {
		t.Helper()
		q := r.Seq
		if q == nil || r.Calls == 0 || len(r.Errors) != 0 || r.Malformed != 0 {
			t.Fatalf("run %+v", r)
		}
		if q.Violations != 0 || q.Checked == 0 || q.Checked > q.Responses || q.WrongNode != 0 || q.SectionMoving != 0 || len(q.Owners) != 1 {
			t.Fatalf("seq %+v", q)
		}
		if !node {
			return
		}
		if q.Owners[0] != addr || r.ServerCPU == nil || r.ServerCPU.PID != pid {
			t.Fatalf("owners %v (want %s), server cpu %+v (want pid %d)", q.Owners, addr, r.ServerCPU, pid)
		}
		if w := q.NodeWrites; w == nil || w.Generator != "chats" || w.Keys == 0 {
			t.Fatalf("node writes %+v", w)
		}
	}
	t.Run("seq", func(t *testing.T) {
		r := bench(t, exitOK, append(sq, "--mode", "seq", "--callers", "4", "--conns", "2", "--duration", "1s")...).Run
		check(t, r, true)
		if r.IDs != r.Calls || r.Seq.Checked != r.Seq.Responses {
			t.Fatalf("%d values from %d calls, %d of %d responses checked", r.IDs, r.Calls, r.Seq.Checked, r.Seq.Responses)
		}
	})
	t.Run("seqs", func(t *testing.T) {
		r := bench(t, exitOK, append(sq, "--mode", "seqs", "--batch", "50", "--key-dist", "zipf", "--callers", "2")...).Run
		check(t, r, true)
		if r.Seq.ItemsPerRPC != 50 || r.IDs != 50*r.Calls {
			t.Fatalf("%.1f items per NextSeqs, %d values from %d calls", r.Seq.ItemsPerRPC, r.IDs, r.Calls)
		}
	})
	t.Run("compare", func(t *testing.T) {
		c := bench(t, exitOK, append(sq, "--mode", "seq", "--compare", "noop", "--callers", "4", "--duration", "150ms", "--warmup", "50ms")...).Compare
		if c == nil || len(c.Pairs) != minPairs || c.Median.RPC <= 0 || c.Median.CPUPerCall <= 0 {
			t.Fatalf("compare %+v", c)
		}
		for _, p := range c.Pairs {
			check(t, p.Node, true)
			check(t, p.Noop, false)
			if p.Noop.Seq.Sections != 64 || p.Noop.Seq.Owners[0] == addr {
				t.Fatalf("noop: %+v; want the node's sections, owned by the no-op's own address", p.Noop.Seq)
			}
		}
	})
	t.Run("not a sequence generator", func(t *testing.T) {
		var out strings.Builder
		args := append(append([]string{}, short...), "--target", addr, "--generator", "default", "--mode", "seq")
		if code := Main(args, &out, &out); code != exitFailed || !strings.Contains(out.String(), `of kind "snowflake"`) {
			t.Fatalf("exit %d: %s", code, out.String())
		}
	})
}
