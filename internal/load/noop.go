package load

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	firnv1 "github.com/firnid/firn/client/firnv1"
	"github.com/firnid/firn/server/grpcopt"
)

// NoopCommand is the hidden subcommand that runs the no-op floor server:
// `--target noop` re-executes its own binary (os.Args[0]) as
//
//	<binary> __bench-noop --listen 127.0.0.1:0 --exit-on-stdin-eof [TLS flags]
//
// so the binary's main must hand os.Args[2:] to NoopMain when os.Args[1]
// is NoopCommand. Main also accepts it as its first argument.
const NoopCommand = "__bench-noop"

// noopReady starts the line the no-op child prints once it listens.
const noopReady = "firn-noop listening "

// NoopOptions configures a no-op server.
type NoopOptions struct {
	// Base is the first ID issued (default 1).
	Base uint64
	// MaxBatch bounds NextIDs' count (default 100,000, the node's
	// default --max-batch).
	MaxBatch uint32
	// DuplicateAt, when not zero, makes the server hand out the ID before
	// it once more in place of ID DuplicateAt: a deliberate duplicate, to
	// show that the load tool's duplicate check finds one.
	DuplicateAt uint64
}

// noopService is the IDService of the no-op floor: a counter, with the
// node's request validation and nothing else.
type noopService struct {
	firnv1.UnimplementedIDServiceServer
	next     atomic.Uint64 // the next ID
	maxBatch uint32
	dupAt    uint64
}

var _ firnv1.IDServiceServer = (*noopService)(nil)

// NewNoopServer returns a gRPC server (with server/grpcopt's options, the
// node's own) serving the no-op IDService and grpc.health.v1 (service ""
// and "default" SERVING). tlsConfig nil means plaintext.
func NewNoopServer(tlsConfig *tls.Config, o NoopOptions) *grpc.Server {
	s := &noopService{maxBatch: o.MaxBatch, dupAt: o.DuplicateAt}
	if s.maxBatch == 0 {
		s.maxBatch = 100_000
	}
	base := o.Base
	if base == 0 {
		base = 1
	}
	s.next.Store(base)
	srv := grpc.NewServer(grpcopt.ServerOptions(tlsConfig, 0)...)
	firnv1.RegisterIDServiceServer(srv, s)
	hs := health.NewServer()
	hs.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	hs.SetServingStatus("default", healthpb.HealthCheckResponse_SERVING)
	healthpb.RegisterHealthServer(srv, hs)
	return srv
}

func (s *noopService) checkGenerator(name string) error {
	if name != "" && name != "default" {
		return status.Errorf(codes.NotFound, "unknown generator %q (the no-op server has only \"default\")", name)
	}
	return nil
}

func (s *noopService) NextID(_ context.Context, req *firnv1.NextIDRequest) (*firnv1.NextIDResponse, error) {
	if err := s.checkGenerator(req.GetGenerator()); err != nil {
		return nil, err
	}
	id := s.next.Add(1) - 1
	if s.dupAt != 0 && id == s.dupAt {
		id--
	}
	return &firnv1.NextIDResponse{Id: id}, nil
}

func (s *noopService) NextIDs(_ context.Context, req *firnv1.NextIDsRequest) (*firnv1.NextIDsResponse, error) {
	if err := s.checkGenerator(req.GetGenerator()); err != nil {
		return nil, err
	}
	n := req.GetCount()
	if n < 1 || n > s.maxBatch {
		return nil, status.Errorf(codes.InvalidArgument, "count %d outside [1, %d]", n, s.maxBatch)
	}
	first := s.next.Add(uint64(n)) - uint64(n)
	ids := make([]uint64, n)
	for i := range ids {
		ids[i] = first + uint64(i)
		if s.dupAt != 0 && ids[i] == s.dupAt {
			ids[i]--
		}
	}
	return &firnv1.NextIDsResponse{Ids: ids}, nil
}

// Decode splits an ID under the snowflake layout (41 time bits in ms from
// the Twitter epoch, 5 datacenter, 5 worker, 12 sequence).
func (s *noopService) Decode(_ context.Context, req *firnv1.DecodeRequest) (*firnv1.DecodeResponse, error) {
	if err := s.checkGenerator(req.GetGenerator()); err != nil {
		return nil, err
	}
	id := req.GetId()
	if id>>63 != 0 {
		return nil, status.Errorf(codes.InvalidArgument, "id %d sets the sign bit", id)
	}
	ms := int64(id>>22) + 1288834974657
	return &firnv1.DecodeResponse{
		Time:       timestamppb.New(time.UnixMilli(ms)),
		Datacenter: uint32(id>>17) & 31,
		Worker:     uint32(id>>12) & 31,
		Sequence:   uint32(id) & 4095,
	}, nil
}

func (s *noopService) Info(context.Context, *firnv1.InfoRequest) (*firnv1.InfoResponse, error) {
	return &firnv1.InfoResponse{
		NodeName:    "noop",
		Version:     "noop",
		Coordinator: "none",
		Generators: []*firnv1.GeneratorInfo{{
			Name: "default", Layout: "noop counter", IsDefault: true, Serving: true,
			State: "serving", MaxBatch: s.maxBatch, IdsIssued: s.next.Load(),
		}},
	}, nil
}

// NoopMain runs the no-op floor server: the child process of
// `--target noop` (args are those after NoopCommand). It prints
// "firn-noop listening ADDR" on stdout once it listens, and serves until
// SIGINT/SIGTERM, or until its standard input closes when
// --exit-on-stdin-eof is given (so it never outlives its parent). It
// returns the process exit code.
func NoopMain(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet(NoopCommand, flag.ContinueOnError)
	fs.SetOutput(stderr)
	listen := fs.String("listen", "127.0.0.1:0", "listen address (loopback only)")
	certFile := fs.String("tls-cert", "", "server certificate (PEM); with --tls-key enables TLS")
	keyFile := fs.String("tls-key", "", "server key (PEM)")
	clientCA := fs.String("client-ca", "", "CA for client certificates (PEM); makes it mTLS")
	base := fs.Uint64("base", 1, "first ID issued")
	maxBatch := fs.Uint("max-batch", 100_000, "largest NextIDs count")
	dupAt := fs.Uint64("duplicate-at", 0, "hand out the ID before this one a second time in its place (tests the duplicate check)")
	stdinEOF := fs.Bool("exit-on-stdin-eof", false, "exit when standard input closes")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	fail := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "firn-noop: "+format+"\n", a...)
		return 2
	}
	host, _, err := net.SplitHostPort(*listen)
	if err != nil {
		return fail("--listen %q: %v", *listen, err)
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		return fail("--listen %q: not a loopback IP address", *listen)
	}
	if *maxBatch < 1 || *maxBatch > 1_000_000 {
		return fail("--max-batch %d outside [1, 1000000]", *maxBatch)
	}
	tlsConfig, err := serverTLS(*certFile, *keyFile, *clientCA)
	if err != nil {
		return fail("%v", err)
	}
	lis, err := net.Listen("tcp", *listen)
	if err != nil {
		return fail("listen: %v", err)
	}
	srv := NewNoopServer(tlsConfig, NoopOptions{Base: *base, MaxBatch: uint32(*maxBatch), DuplicateAt: *dupAt})
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if *stdinEOF {
		go func() {
			io.Copy(io.Discard, os.Stdin)
			stop()
		}()
	}
	go func() {
		<-ctx.Done()
		done := make(chan struct{})
		go func() { srv.GracefulStop(); close(done) }()
		select {
		case <-done:
		case <-time.After(2 * time.Second):
			srv.Stop()
		}
	}()
	fmt.Fprintf(stdout, "%s%s pid=%d\n", noopReady, lis.Addr(), os.Getpid())
	if err := srv.Serve(lis); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
		fmt.Fprintf(stderr, "firn-noop: serve: %v\n", err)
		return 1
	}
	return 0
}

// serverTLS builds the no-op server's TLS config; all empty means none.
func serverTLS(certFile, keyFile, clientCA string) (*tls.Config, error) {
	if certFile == "" && keyFile == "" {
		if clientCA != "" {
			return nil, errors.New("--client-ca needs --tls-cert and --tls-key")
		}
		return nil, nil
	}
	if certFile == "" || keyFile == "" {
		return nil, errors.New("--tls-cert and --tls-key go together")
	}
	pair, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("TLS certificate: %w", err)
	}
	cfg := &tls.Config{Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}
	if clientCA != "" {
		pem, err := os.ReadFile(clientCA)
		if err != nil {
			return nil, fmt.Errorf("--client-ca: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--client-ca %s holds no PEM certificate", clientCA)
		}
		cfg.ClientCAs = pool
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return cfg, nil
}

// noopChild is a no-op server running as a child process.
type noopChild struct {
	cmd   *exec.Cmd
	addr  string
	stdin io.Closer
	done  chan struct{}
}

// startNoopChild re-executes this binary as the no-op server with extra
// arguments and waits (up to 10 s) until it listens.
func startNoopChild(extra []string, stderr io.Writer) (*noopChild, error) {
	args := append([]string{NoopCommand, "--listen", "127.0.0.1:0", "--exit-on-stdin-eof"}, extra...)
	cmd := exec.Command(os.Args[0], args...)
	cmd.Stderr = stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("bench: start the no-op server (%s %s): %w", os.Args[0], NoopCommand, err)
	}
	c := &noopChild{cmd: cmd, stdin: stdin, done: make(chan struct{})}
	line := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		if sc.Scan() {
			line <- sc.Text()
		}
		close(line)
		io.Copy(io.Discard, stdout)
		cmd.Wait()
		close(c.done)
	}()
	timer := time.NewTimer(10 * time.Second)
	defer timer.Stop()
	select {
	case l, ok := <-line:
		rest, found := strings.CutPrefix(l, noopReady)
		if ok && found {
			c.addr, _, _ = strings.Cut(rest, " ")
			return c, nil
		}
		c.stop()
		return nil, fmt.Errorf("bench: the no-op server did not start (it said %q; is %s wired to load.NoopMain?)", l, NoopCommand)
	case <-timer.C:
		c.stop()
		return nil, errors.New("bench: the no-op server did not listen within 10s")
	}
}

func (c *noopChild) pid() int { return c.cmd.Process.Pid }

// stop ends the child: stdin closed and SIGTERM, then SIGKILL after 3 s.
func (c *noopChild) stop() {
	c.stdin.Close()
	c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-c.done:
		return
	case <-time.After(3 * time.Second):
	}
	c.cmd.Process.Kill()
	<-c.done
}
