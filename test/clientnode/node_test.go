package clientnode

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/firnid/firn/client"
	firnv1 "github.com/firnid/firn/client/firnv1"
	"github.com/firnid/firn/internal/testing/freeport"
)

// buildFirn builds the firn binary into a temporary directory.
func buildFirn(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "firn")
	cmd := exec.Command("go", "build", "-o", bin, "github.com/firnid/firn/cmd/firn")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/firn: %v\n%s", err, out)
	}
	return bin
}

func freePort(t *testing.T) string {
	t.Helper()
	return strconv.Itoa(freeport.Port(t))
}

// node is a firn node process.
type node struct {
	cmd   *exec.Cmd
	addr  string
	log   string
	done  chan struct{}
	creds credentials.TransportCredentials // how the test reaches it
}

// startNode runs `firn serve` with args plus its own data dir and
// listeners, and waits until its health says SERVING. The test kills it
// at the end if it still runs.
func startNode(t *testing.T, bin string, args ...string) *node {
	t.Helper()
	return startNodeAt(t, bin, "127.0.0.1:"+freePort(t), args...)
}

// startNodeAt is startNode with the gRPC listener on addr.
func startNodeAt(t *testing.T, bin, addr string, args ...string) *node {
	t.Helper()
	return startNodeCreds(t, bin, addr, insecure.NewCredentials(), args...)
}

// startNodeCreds is startNodeAt for a node the test reaches with creds
// (one serving TLS).
func startNodeCreds(t *testing.T, bin, addr string, creds credentials.TransportCredentials, args ...string) *node {
	t.Helper()
	n := launchNode(t, bin, addr, creds, args...)
	n.waitServing(t)
	return n
}

// launchNode starts the node's process and returns without waiting for
// it to serve (waitServing does), so that several nodes can start at once.
func launchNode(t *testing.T, bin, addr string, creds credentials.TransportCredentials, args ...string) *node {
	t.Helper()
	dir := t.TempDir()
	n := &node{addr: addr, log: filepath.Join(dir, "node.log"), done: make(chan struct{}), creds: creds}
	logf, err := os.Create(n.log)
	if err != nil {
		t.Fatal(err)
	}
	// No NTP, and nodes joining another's embedded etcd one or two at a
	// time: --unchecked-clock-ok (these tests are about the client, not the
	// clock check).
	args = append([]string{"serve", "--data-dir", filepath.Join(dir, "data"),
		"--grpc-addr", n.addr, "--http-addr", "127.0.0.1:" + freePort(t), "--unchecked-clock-ok"}, args...)
	n.cmd = exec.Command(bin, args...)
	n.cmd.Stdout, n.cmd.Stderr = logf, logf
	if err := n.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { n.cmd.Wait(); logf.Close(); close(n.done) }()
	t.Cleanup(func() {
		n.cmd.Process.Kill()
		<-n.done
		if t.Failed() {
			b, _ := os.ReadFile(n.log)
			t.Logf("node %s log:\n%s", n.addr, b)
		}
	})
	return n
}

// waitServing waits until the node's health says SERVING (60 s at most).
func (n *node) waitServing(t *testing.T) {
	t.Helper()
	conn, err := grpc.NewClient(n.addr, grpc.WithTransportCredentials(n.creds))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	hc := healthpb.NewHealthClient(conn)
	waitFor(t, 60*time.Second, "node "+n.addr+" to serve", func() bool {
		select {
		case <-n.done:
			b, _ := os.ReadFile(n.log)
			t.Fatalf("node exited before serving:\n%s", b)
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		resp, err := hc.Check(ctx, &healthpb.HealthCheckRequest{})
		return err == nil && resp.GetStatus() == healthpb.HealthCheckResponse_SERVING
	})
}

// info asks the node's Info over a fresh connection.
func (n *node) info(t *testing.T) *firnv1.InfoResponse {
	t.Helper()
	conn, err := grpc.NewClient(n.addr, grpc.WithTransportCredentials(n.creds))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	info, err := firnv1.NewIDServiceClient(conn).Info(ctx, &firnv1.InfoRequest{})
	if err != nil {
		t.Fatal(err)
	}
	return info
}

// slot returns the node's default generator's datacenter and worker.
func (n *node) slot(t *testing.T) (dc, worker uint32, etcdURL string) {
	t.Helper()
	info := n.info(t)
	for _, g := range info.GetGenerators() {
		if g.GetIsDefault() {
			return g.GetDatacenter(), g.GetWorker(), info.GetEmbeddedEtcdUrl()
		}
	}
	t.Fatalf("node %s has no default generator: %v", n.addr, info)
	return 0, 0, ""
}

// cause returns why the node's default generator does not serve ("" while
// it serves), as Info says.
func (n *node) cause(t *testing.T) string {
	t.Helper()
	return n.info(t).GetGenerators()[0].GetCause()
}

// TestRealNodesKilledMidStream runs two firn nodes on one coordinator (the
// first node's embedded etcd, which the second joins), takes IDs through
// the client, and SIGKILLs the node it is serving from: the callers see
// no error, the other node serves, and no ID repeats.
func TestRealNodesKilledMidStream(t *testing.T) {
	bin := buildFirn(t)
	a := startNode(t, bin, "--embedded-client-addr", "127.0.0.1:"+freePort(t),
		"--embedded-peer-addr", "127.0.0.1:"+freePort(t))
	dcA, workerA, etcdURL := a.slot(t)
	if etcdURL == "" {
		t.Fatal("the first node shows no embedded etcd URL in Info")
	}
	b := startNode(t, bin, "--etcd", etcdURL)
	dcB, workerB, _ := b.slot(t)
	if dcA == dcB && workerA == workerB {
		t.Fatalf("both nodes hold dc=%d worker=%d", dcA, workerA)
	}
	// snowflake: 41 time, 5 datacenter, 5 worker, 12 sequence bits.
	owner := func(id uint64) string {
		dc, w := uint32(id>>17)&31, uint32(id>>12)&31
		switch {
		case dc == dcA && w == workerA:
			return "A"
		case dc == dcB && w == workerB:
			return "B"
		}
		return fmt.Sprintf("dc=%d worker=%d", dc, w)
	}

	// The client starts on B (listed first); B dies mid-stream.
	c := newClient(t, []string{b.addr, a.addr}, client.WithMaxAge(time.Second), client.WithCallTimeout(2*time.Second))
	ctx := ctxFor(t, 60*time.Second)
	const callers = 4
	var (
		mu     sync.Mutex
		all    []uint64
		killed bool
		after  int
	)
	var wg sync.WaitGroup
	errs := make(chan error, callers)
	for range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				id, err := c.Next(ctx)
				if err != nil {
					errs <- err
					return
				}
				mu.Lock()
				all = append(all, id)
				if killed {
					after++
				}
				if len(all) == 50_000 && !killed {
					if err := b.cmd.Process.Kill(); err != nil {
						t.Error(err)
					}
					killed = true
				}
				done := killed && after >= 100_000
				mu.Unlock()
				if done {
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("a caller saw an error while node A served: %v", err)
	}
	checkDistinct(t, all)
	counts := map[string]int{}
	for _, id := range all {
		counts[owner(id)]++
	}
	if counts["A"] == 0 || counts["B"] == 0 || len(counts) != 2 {
		t.Fatalf("IDs by node: %v; want only A and B, both", counts)
	}
	if got := c.Stats().Endpoint; got != a.addr {
		t.Fatalf("serving from %s after B died, want A %s", got, a.addr)
	}
	select {
	case <-b.done:
	case <-time.After(5 * time.Second):
		t.Fatal("node B still running after SIGKILL")
	}
}
