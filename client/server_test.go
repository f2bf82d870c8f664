package client

import (
	"bufio"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/firnid/firn/client/clienttest"
	firnv1 "github.com/firnid/firn/client/firnv1"
)

// childEnv makes the test binary a test server process (see TestMain):
// its value is the first ID the server issues.
const childEnv = "FIRN_CLIENT_TEST_SERVER_BASE"

func TestMain(m *testing.M) {
	if base := os.Getenv(childEnv); base != "" {
		os.Exit(childMain(base))
	}
	goleak.VerifyTestMain(m)
}

// childMain serves a testServer on 127.0.0.1:0, prints its address, and
// exits when its standard input closes (the parent is gone) or it is
// killed.
func childMain(baseStr string) int {
	base, err := strconv.ParseUint(baseStr, 10, 64)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bad base:", err)
		return 2
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	ts := clienttest.NewService(base)
	srv := grpc.NewServer(clienttest.ServerOptions(nil)...)
	ts.Register(srv)
	fmt.Printf("listening %s\n", lis.Addr())
	go func() {
		io.Copy(io.Discard, os.Stdin)
		srv.Stop()
	}()
	if err := srv.Serve(lis); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// testService is the fake node of clienttest: consecutive IDs from a
// start, so test servers with disjoint starts issue disjoint IDs.
type testService = clienttest.Service

// down makes s refuse as a node that lost its lease does.
func down(s *testService) {
	s.Refuse(firnv1.ErrorReason_LEASE_LOST, "test: not serving", 1500*time.Millisecond)
}

// asked is the counts s was asked for: NextRange's, or with ids NextIDs'.
func asked(s *testService, ids bool) []uint64 {
	if !ids {
		return s.RangeCounts()
	}
	var out []uint64
	for _, c := range s.Counts() {
		out = append(out, uint64(c))
	}
	return out
}

// lastCount is the last count NextRange was asked for.
func lastCount(s *testService) uint64 {
	c := s.RangeCounts()
	if len(c) == 0 {
		return 0
	}
	return c[len(c)-1]
}

// maxCount is the largest count NextRange was asked for.
func maxCount(s *testService) uint64 {
	var m uint64
	for _, c := range s.RangeCounts() {
		m = max(m, c)
	}
	return m
}

// startService serves a testService in this process until the test ends.
func startService(t testing.TB, base uint64, tlsConfig *tls.Config) (*testService, string) {
	t.Helper()
	srv := clienttest.NewServer(base, tlsConfig)
	t.Cleanup(srv.Close)
	return srv.Service, srv.Addr
}

// serveIDs serves ids (and health, when not nil) on a loopback port
// until the test ends, and returns the address.
func serveIDs(t testing.TB, ids firnv1.IDServiceServer, health healthpb.HealthServer) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(clienttest.ServerOptions(nil)...)
	firnv1.RegisterIDServiceServer(srv, ids)
	if health != nil {
		healthpb.RegisterHealthServer(srv, health)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		srv.Serve(lis)
	}()
	t.Cleanup(func() {
		srv.Stop()
		<-done
	})
	return lis.Addr().String()
}

// child is a test server in its own process.
type child struct {
	cmd   *exec.Cmd
	addr  string
	stdin io.Closer
}

// startChild starts a test server process issuing IDs from base; the test
// kills it at the end if it is still running.
func startChild(t *testing.T, base uint64) *child {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+strconv.FormatUint(base, 10))
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c := &child{cmd: cmd, stdin: stdin}
	waited := make(chan struct{})
	t.Cleanup(func() {
		stdin.Close()
		cmd.Process.Kill()
		<-waited
	})
	line := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		if sc.Scan() {
			line <- sc.Text()
		}
		close(line)
		io.Copy(io.Discard, stdout)
		cmd.Wait()
		close(waited)
	}()
	select {
	case l, ok := <-line:
		addr, found := strings.CutPrefix(l, "listening ")
		if !ok || !found {
			t.Fatalf("test server process said %q", l)
		}
		c.addr = addr
	case <-time.After(10 * time.Second):
		t.Fatal("test server process did not start within 10s")
	}
	return c
}

// kill ends the process at once (SIGKILL).
func (c *child) kill(t *testing.T) {
	t.Helper()
	if err := c.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
}
