package client

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	firnv1 "github.com/firnid/firn/proto/firn/v1"
	"github.com/firnid/firn/server/grpcopt"
)

// notServing is the refusal of a down test service, with the details a
// node sends.
func notServing() error {
	st, err := status.New(codes.Unavailable, "test: not serving").WithDetails(
		&errdetails.ErrorInfo{Reason: "LEASE_LOST", Domain: "firn", Metadata: map[string]string{"generator": "default"}},
		&errdetails.RetryInfo{RetryDelay: durationpb.New(1500 * time.Millisecond)})
	if err != nil {
		panic(err)
	}
	return st.Err()
}

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
	ts := newTestService(base)
	srv := grpc.NewServer(grpcopt.ServerOptions(nil)...)
	ts.register(srv)
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

// testService is an IDService that issues consecutive IDs from base, so
// test servers with disjoint bases issue disjoint IDs. It can be told to
// answer UNAVAILABLE, to hide its batch bound, and to refuse counts above
// a bound, and to answer NextIDs late; it records the counts asked for.
type testService struct {
	firnv1.UnimplementedIDServiceServer
	base     uint64
	next     atomic.Uint64
	health   *health.Server
	down     atomic.Bool  // NextID(s) answer UNAVAILABLE
	maxBatch atomic.Int64 // counts above are INVALID_ARGUMENT
	hideInfo atomic.Bool  // Info answers UNIMPLEMENTED
	delay    atomic.Int64 // NextIDs answers after this many nanoseconds

	mu     sync.Mutex
	counts []uint32
}

func newTestService(base uint64) *testService {
	s := &testService{base: base, health: health.NewServer()}
	s.next.Store(base)
	s.maxBatch.Store(100_000)
	s.health.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	return s
}

func (s *testService) register(srv *grpc.Server) {
	firnv1.RegisterIDServiceServer(srv, s)
	healthpb.RegisterHealthServer(srv, s.health)
}

func (s *testService) NextID(context.Context, *firnv1.NextIDRequest) (*firnv1.NextIDResponse, error) {
	if s.down.Load() {
		return nil, notServing()
	}
	return &firnv1.NextIDResponse{Id: s.next.Add(1) - 1}, nil
}

func (s *testService) NextIDs(ctx context.Context, req *firnv1.NextIDsRequest) (*firnv1.NextIDsResponse, error) {
	if d := time.Duration(s.delay.Load()); d > 0 {
		select {
		case <-time.After(d):
		case <-ctx.Done():
			return nil, status.FromContextError(ctx.Err()).Err()
		}
	}
	if s.down.Load() {
		return nil, notServing()
	}
	n := req.GetCount()
	s.mu.Lock()
	s.counts = append(s.counts, n)
	s.mu.Unlock()
	if n < 1 || int64(n) > s.maxBatch.Load() {
		return nil, status.Errorf(codes.InvalidArgument, "count %d outside [1, %d]", n, s.maxBatch.Load())
	}
	end := s.next.Add(uint64(n))
	ids := make([]uint64, n)
	for i := range ids {
		ids[i] = end - uint64(n) + uint64(i)
	}
	return &firnv1.NextIDsResponse{Ids: ids}, nil
}

func (s *testService) Info(context.Context, *firnv1.InfoRequest) (*firnv1.InfoResponse, error) {
	if s.hideInfo.Load() {
		return nil, status.Error(codes.Unimplemented, "test: no Info")
	}
	return &firnv1.InfoResponse{NodeName: "test", Generators: []*firnv1.GeneratorInfo{{
		Name: "default", IsDefault: true, Serving: !s.down.Load(), MaxBatch: uint32(s.maxBatch.Load()),
	}}}, nil
}

// issued is how many IDs the service handed out.
func (s *testService) issued() uint64 { return s.next.Load() - s.base }

func (s *testService) lastCount() uint32 {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.counts) == 0 {
		return 0
	}
	return s.counts[len(s.counts)-1]
}

func (s *testService) maxCount() uint32 {
	s.mu.Lock()
	defer s.mu.Unlock()
	var m uint32
	for _, c := range s.counts {
		m = max(m, c)
	}
	return m
}

func (s *testService) owns(id uint64) bool { return id >= s.base && id < s.next.Load() }

// startService serves a testService in this process until the test ends.
func startService(t testing.TB, base uint64, tlsConfig *tls.Config) (*testService, string) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ts := newTestService(base)
	srv := grpc.NewServer(grpcopt.ServerOptions(tlsConfig)...)
	ts.register(srv)
	done := make(chan struct{})
	go func() {
		defer close(done)
		srv.Serve(lis)
	}()
	t.Cleanup(func() {
		srv.Stop()
		<-done
	})
	return ts, lis.Addr().String()
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

// tlsServer returns a server TLS config over the certificate files.
func tlsServer(t *testing.T, certFile, keyFile string, clientCA *tls.Config) *tls.Config {
	t.Helper()
	pair, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	cfg := &tls.Config{Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}
	if clientCA != nil {
		cfg.ClientCAs = clientCA.RootCAs
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return cfg
}
