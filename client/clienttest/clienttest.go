// Package clienttest is a stand-in for a firn node, for the tests of
// programs that use the client: a Server answers the firn.v1 IDService and
// gRPC health on a loopback port, issuing consecutive IDs from a start
// value, and can be told to refuse as a node does (UNAVAILABLE with
// ErrorInfo and RetryInfo), to answer late, to bound its batches, to
// leave gaps between runs of IDs, or to answer NextRange UNIMPLEMENTED as
// an older node does. Give its Addr to client.New.
//
// NextRange answers runs of at most 4096 IDs (SetRuns), each ending where
// a node's millisecond would; NextIDs answers the same IDs one by one.
// It issues IDs from a counter, not from a clock, and decodes them under
// the snowflake preset's widths (41-bit time in ms, 10-bit worker, 12-bit
// sequence): it checks what a program does with IDs and refusals, not
// firn's guarantees.
package clienttest

import (
	"context"
	"crypto/tls"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	firnv1 "github.com/firnid/firn/client/firnv1"
)

// Epoch is the time origin Decode uses (the snowflake preset's).
var Epoch = time.Date(2010, 11, 4, 1, 42, 54, 657_000_000, time.UTC)

// ServerOptions are the gRPC server options a node uses that a client
// notices: message bounds and the keepalive policy (a client pinging more
// often than every 10 s is sent away).
func ServerOptions(tlsConfig *tls.Config) []grpc.ServerOption {
	opts := []grpc.ServerOption{
		grpc.MaxRecvMsgSize(64 << 10),
		grpc.MaxSendMsgSize(9 << 20),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 10 * time.Second, PermitWithoutStream: true}),
	}
	if tlsConfig != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(tlsConfig)))
	}
	return opts
}

// Service is the fake IDService; Server serves one. Its methods are safe
// for concurrent use.
type Service struct {
	firnv1.UnimplementedIDServiceServer
	start uint64
	// issued counts the IDs handed out; the k-th is at(k): runs of runLen
	// consecutive IDs, runGap IDs skipped after each.
	issued    atomic.Uint64
	runLen    atomic.Uint64
	runGap    atomic.Uint64
	health    *health.Server
	refusal   atomic.Pointer[status.Status] // non-nil: NextID(s) and NextRange answer it
	maxBatch  atomic.Int64                  // NextIDs counts above are INVALID_ARGUMENT
	maxRange  atomic.Uint64                 // NextRange counts above are INVALID_ARGUMENT
	hideInfo  atomic.Bool                   // Info answers UNIMPLEMENTED
	hideRange atomic.Bool                   // NextRange answers UNIMPLEMENTED
	delay     atomic.Int64                  // NextIDs and NextRange answer after this many nanoseconds

	mu          sync.Mutex
	counts      []uint32
	rangeCounts []uint64
}

// NewService returns a serving Service whose first ID is start.
func NewService(start uint64) *Service {
	s := &Service{start: start, health: health.NewServer()}
	s.runLen.Store(4096)
	s.maxBatch.Store(100_000)
	s.maxRange.Store(1_000_000)
	s.health.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	return s
}

// Register adds the service and its health to srv.
func (s *Service) Register(srv *grpc.Server) {
	firnv1.RegisterIDServiceServer(srv, s)
	healthpb.RegisterHealthServer(srv, s.health)
}

// Refuse makes NextID, NextIDs and NextRange answer UNAVAILABLE with msg, an
// ErrorInfo of reason (domain firn.v1.IDService) and, when retryAfter > 0, a
// RetryInfo — as a node that stopped serving does. Health is left alone
// (a node's health follows a moment later; SetHealth does that).
func (s *Service) Refuse(reason firnv1.ErrorReason, msg string, retryAfter time.Duration) {
	info := &errdetails.ErrorInfo{Reason: reason.String(), Domain: "firn.v1.IDService", Metadata: map[string]string{"generator": "default"}}
	st, _ := status.New(codes.Unavailable, msg).WithDetails(info)
	if retryAfter > 0 {
		st, _ = status.New(codes.Unavailable, msg).WithDetails(info, &errdetails.RetryInfo{RetryDelay: durationpb.New(retryAfter)})
	}
	s.refusal.Store(st)
}

// Shed makes NextID, NextIDs and NextRange answer RESOURCE_EXHAUSTED with ErrorInfo
// OVERLOADED and a RetryInfo of retryAfter, as a node whose generator is
// asked for more than it produces does.
func (s *Service) Shed(retryAfter time.Duration) {
	info := &errdetails.ErrorInfo{Reason: firnv1.ErrorReason_OVERLOADED.String(), Domain: "firn.v1.IDService",
		Metadata: map[string]string{"generator": "default"}}
	st, _ := status.New(codes.ResourceExhausted, `generator "default" overloaded (clienttest)`).WithDetails(info,
		&errdetails.RetryInfo{RetryDelay: durationpb.New(retryAfter)})
	s.refusal.Store(st)
}

// Serve ends a Refuse or a Shed.
func (s *Service) Serve() { s.refusal.Store(nil) }

// SetHealth sets the health status the client watches.
func (s *Service) SetHealth(serving bool) {
	st := healthpb.HealthCheckResponse_SERVING
	if !serving {
		st = healthpb.HealthCheckResponse_NOT_SERVING
	}
	s.health.SetServingStatus("", st)
}

// Health is the gRPC health server the service reports through (for a
// test that registers its own IDService beside it).
func (s *Service) Health() *health.Server { return s.health }

// SetMaxBatch bounds NextIDs' count (default 100,000), as Info reports.
func (s *Service) SetMaxBatch(n int) { s.maxBatch.Store(int64(n)) }

// SetMaxRange bounds NextRange's count (default 1,000,000), as Info
// reports.
func (s *Service) SetMaxRange(n uint64) { s.maxRange.Store(n) }

// HideInfo makes Info answer UNIMPLEMENTED, as an older node would.
func (s *Service) HideInfo(hide bool) { s.hideInfo.Store(hide) }

// HideRange makes NextRange answer UNIMPLEMENTED and Info leave out
// max_range, as a node from before NextRange does.
func (s *Service) HideRange(hide bool) { s.hideRange.Store(hide) }

// SetRuns makes the service issue runs of length consecutive IDs (default
// 4096, a millisecond of a snowflake worker's sequence) and skip gap IDs
// after each (default 0), as a node's IDs jump from one millisecond to the
// next. Call it before the service issues an ID.
func (s *Service) SetRuns(length, gap uint64) {
	s.runLen.Store(max(length, 1))
	s.runGap.Store(gap)
}

// SetDelay makes NextIDs and NextRange answer after d (or the caller's
// deadline).
func (s *Service) SetDelay(d time.Duration) { s.delay.Store(int64(d)) }

// Issued is how many IDs the service handed out.
func (s *Service) Issued() uint64 { return s.issued.Load() }

// Owns reports whether the service issued id.
func (s *Service) Owns(id uint64) bool {
	if id < s.start {
		return false
	}
	l, g := s.runLen.Load(), s.runGap.Load()
	off := id - s.start
	run, i := off/(l+g), off%(l+g)
	return i < l && run*l+i < s.issued.Load()
}

// Counts returns the counts NextIDs was asked for, in order.
func (s *Service) Counts() []uint32 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.counts)
}

// RangeCounts returns the counts NextRange was asked for, in order,
// including the calls it answered UNIMPLEMENTED (HideRange).
func (s *Service) RangeCounts() []uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.rangeCounts)
}

// at is the k-th ID the service issues.
func (s *Service) at(k uint64) uint64 {
	l, g := s.runLen.Load(), s.runGap.Load()
	return s.start + k/l*(l+g) + k%l
}

// issue hands out the next n IDs, as runs that end where a run of the
// service's ends.
func (s *Service) issue(n uint64) []*firnv1.Run {
	k := s.issued.Add(n) - n
	l := s.runLen.Load()
	var runs []*firnv1.Run
	for n > 0 {
		c := min(n, l-k%l)
		runs = append(runs, &firnv1.Run{First: s.at(k), Count: c})
		k, n = k+c, n-c
	}
	return runs
}

// wait holds an answer back for the delay SetDelay set.
func (s *Service) wait(ctx context.Context) error {
	d := time.Duration(s.delay.Load())
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return status.FromContextError(ctx.Err()).Err()
	}
}

func (s *Service) NextID(context.Context, *firnv1.NextIDRequest) (*firnv1.NextIDResponse, error) {
	if st := s.refusal.Load(); st != nil {
		return nil, st.Err()
	}
	return &firnv1.NextIDResponse{Id: s.issue(1)[0].GetFirst()}, nil
}

func (s *Service) NextIDs(ctx context.Context, req *firnv1.NextIDsRequest) (*firnv1.NextIDsResponse, error) {
	if err := s.wait(ctx); err != nil {
		return nil, err
	}
	if st := s.refusal.Load(); st != nil {
		return nil, st.Err()
	}
	n := req.GetCount()
	s.mu.Lock()
	s.counts = append(s.counts, n)
	s.mu.Unlock()
	if n < 1 || int64(n) > s.maxBatch.Load() {
		return nil, status.Errorf(codes.InvalidArgument, "count %d outside [1, %d]", n, s.maxBatch.Load())
	}
	ids := make([]uint64, 0, n)
	for _, r := range s.issue(uint64(n)) {
		for i := range r.GetCount() {
			ids = append(ids, r.GetFirst()+i)
		}
	}
	return &firnv1.NextIDsResponse{Ids: ids}, nil
}

// NextRange answers the next count IDs as runs (see SetRuns), or
// UNIMPLEMENTED after HideRange.
func (s *Service) NextRange(ctx context.Context, req *firnv1.NextRangeRequest) (*firnv1.NextRangeResponse, error) {
	n := req.GetCount()
	s.mu.Lock()
	s.rangeCounts = append(s.rangeCounts, n)
	s.mu.Unlock()
	if s.hideRange.Load() {
		return nil, status.Error(codes.Unimplemented, "method NextRange not implemented")
	}
	if err := s.wait(ctx); err != nil {
		return nil, err
	}
	if st := s.refusal.Load(); st != nil {
		return nil, st.Err()
	}
	if n < 1 || n > s.maxRange.Load() {
		return nil, status.Errorf(codes.InvalidArgument, "count %d outside [1, %d]", n, s.maxRange.Load())
	}
	return &firnv1.NextRangeResponse{Runs: s.issue(n)}, nil
}

func (s *Service) Decode(_ context.Context, req *firnv1.DecodeRequest) (*firnv1.DecodeResponse, error) {
	id := req.GetId()
	if id>>63 != 0 {
		return nil, status.Errorf(codes.InvalidArgument, "id %d sets the sign bit, outside the layout's 63 bits", id)
	}
	return &firnv1.DecodeResponse{
		Time:     timestamppb.New(Epoch.Add(time.Duration(id>>22) * time.Millisecond)),
		Worker:   uint32(id >> 12 & 1023),
		Sequence: uint32(id & 4095),
	}, nil
}

func (s *Service) Info(context.Context, *firnv1.InfoRequest) (*firnv1.InfoResponse, error) {
	if s.hideInfo.Load() {
		return nil, status.Error(codes.Unimplemented, "clienttest: no Info")
	}
	g := &firnv1.GeneratorInfo{Name: "default", IsDefault: true, Serving: s.refusal.Load() == nil,
		MaxBatch: uint32(s.maxBatch.Load()), State: "serving"}
	if !s.hideRange.Load() {
		g.MaxRange = s.maxRange.Load()
	}
	if st := s.refusal.Load(); st != nil {
		g.State, g.Reason = "not-serving", st.Message()
	}
	return &firnv1.InfoResponse{NodeName: "clienttest", Generators: []*firnv1.GeneratorInfo{g}}, nil
}

// Server is a Service on a loopback port.
type Server struct {
	*Service
	// Addr is the host:port to give the client.
	Addr string
	srv  *grpc.Server
	done chan struct{}
}

// NewServer serves a Service whose first ID is start on 127.0.0.1 (TLS
// when tlsConfig is not nil) until Close. It panics if it cannot listen,
// as net/http/httptest does.
func NewServer(start uint64, tlsConfig *tls.Config) *Server {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic("clienttest: " + err.Error())
	}
	return NewServerOn(lis, start, tlsConfig)
}

// NewServerOn is NewServer on a listener of the caller's (for example
// several servers on one port of 127.0.0.1, 127.0.0.2, …, as the
// addresses of one DNS name).
func NewServerOn(lis net.Listener, start uint64, tlsConfig *tls.Config) *Server {
	s := &Server{Service: NewService(start), Addr: lis.Addr().String(),
		srv: grpc.NewServer(ServerOptions(tlsConfig)...), done: make(chan struct{})}
	s.Register(s.srv)
	go func() {
		defer close(s.done)
		s.srv.Serve(lis)
	}()
	return s
}

// Close stops the server at once, closing every connection.
func (s *Server) Close() {
	s.srv.Stop()
	<-s.done
}
