package load

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"slices"
	"strconv"
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
	"github.com/spf13/pflag"

	"github.com/firnid/firn/generator"
	"github.com/firnid/firn/segment"
	"github.com/firnid/firn/seq"
	"github.com/firnid/firn/server/grpcopt"
)

// noopBallast is what the no-op child holds live beyond its own heap, so
// that the two make NoopMain's --heap.
var noopBallast []byte

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
	// Layout is the layout Info reports, and the one that shapes
	// NextRange's runs (see Workers); empty: "noop counter", runs cut as
	// snowflake's. One that does not parse is reported as is and cut as
	// empty (NoopMain refuses it).
	Layout string
	// Workers are the workers Info reports the generator holds, as
	// Info gives them: ascending, each its node fields in one number
	// (datacenter × 2^worker_bits + worker); default: worker 0. NextRange
	// cuts its runs where a node holding them would: one run per worker's
	// block of the layout's per-unit count in each unit, joined where the
	// workers' IDs meet (consecutive node fields). So with --compare noop
	// the floor returns as many runs as the node, for the same counts.
	Workers []uint32
	// MaxRange bounds NextRange's count (default defaultNoopMaxRange).
	MaxRange uint64
	// Name is the one generator's name (default "default"); calls name
	// it or none.
	Name string
	// Kind is the generator's kind as Info reports it: "" or "snowflake"
	// (runs cut as above), or "segment": a node's segment generator hands
	// out a take as one run of consecutive IDs (two where it spans two
	// claims), so NextRange returns one run per call, Layout is reported
	// as is (the segment definition) and Workers do not apply; or "seq":
	// a sequence generator (see Sections).
	Kind string
	// Sections is a sequence generator's sections (Kind "seq"; default
	// seq.DefaultSections), Address the server's own gRPC address: its
	// Info reports every section owned by Address, so that firn bench's
	// routing (the section map of Info) sends it every key.
	Sections int
	Address  string
}

// kindSegment is Info's kind of a segment generator.
const kindSegment = "segment"

// defaultNoopMaxRange is the no-op server's max_range when none is given;
// --compare noop in ranges mode passes the node's own.
const defaultNoopMaxRange = 1 << 24

// noopService is the IDService of the no-op floor: a counter, with the
// node's request validation and nothing else.
//
// As a sequence generator (Kind "seq") it answers NextSeq and NextSeqs
// from the same counter, one atomic add per call whatever the keys: no
// per-key state, no hashing, no lock. Every value is handed out once
// across all keys and values increase in real time, so the per-key
// checker passes, and what the floor costs is the gRPC path and the
// messages (keys in, results out) alone: a node/noop ratio of CPU per
// call is what the node's sections, maps and locks add to that.
type noopService struct {
	firnv1.UnimplementedIDServiceServer
	next     atomic.Uint64 // the next ID
	maxBatch uint32
	dupAt    uint64
	name     string
	kind     string
	layout   string
	workers  []uint32
	maxRange uint64
	// dc and worker are Info's: the first worker's node fields split by
	// the layout (without one, all worker).
	dc, worker uint32
	// NextRange's shape: the counter is cut into blocks of block IDs, k
	// of them per unit (one per worker); join[j] says block j of a unit
	// continues the block before it (for j = 0: the previous unit's last)
	// as the node's IDs would.
	block uint64
	join  []bool
	// A sequence generator's sections and own address (Info).
	sections int
	addr     string
}

var _ firnv1.IDServiceServer = (*noopService)(nil)

// NewNoopServer returns a gRPC server (with server/grpcopt's options, the
// node's own) serving the no-op IDService and grpc.health.v1 (service ""
// and "default" SERVING). tlsConfig nil means plaintext.
func NewNoopServer(tlsConfig *tls.Config, o NoopOptions) *grpc.Server {
	srv := grpc.NewServer(grpcopt.ServerOptions(tlsConfig, 0)...)
	firnv1.RegisterIDServiceServer(srv, newNoopService(o))
	hs := health.NewServer()
	hs.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	hs.SetServingStatus("default", healthpb.HealthCheckResponse_SERVING)
	healthpb.RegisterHealthServer(srv, hs)
	return srv
}

func newNoopService(o NoopOptions) *noopService {
	s := &noopService{maxBatch: o.MaxBatch, dupAt: o.DuplicateAt, name: o.Name, kind: o.Kind, layout: o.Layout,
		workers: o.Workers, maxRange: o.MaxRange}
	if s.name == "" {
		s.name = "default"
	}
	if s.maxBatch == 0 {
		s.maxBatch = 100_000
	}
	if s.maxRange == 0 {
		s.maxRange = defaultNoopMaxRange
	}
	s.sections, s.addr = o.Sections, o.Address
	if s.sections == 0 {
		s.sections = seq.DefaultSections
	}
	if len(s.workers) == 0 {
		s.workers = []uint32{0}
	}
	s.block, s.join = rangeShape(o.Layout, s.workers)
	s.worker = s.workers[0]
	if l, err := generator.ParseLayout(o.Layout); err == nil {
		s.dc, s.worker = s.workers[0]>>l.WorkerBits, s.workers[0]&(1<<l.WorkerBits-1)
	}
	base := o.Base
	if base == 0 {
		base = 1
	}
	s.next.Store(base)
	return s
}

func (s *noopService) checkGenerator(name string) error {
	if name != "" && name != s.name {
		return status.Errorf(codes.NotFound, "unknown generator %q (the no-op server has only %q)", name, s.name)
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

// rangeShape is how NextRange cuts the counter for a node of the layout
// holding the workers (node-fields numbers, ascending).
func rangeShape(layout string, workers []uint32) (block uint64, join []bool) {
	l, err := generator.ParseLayout(layout)
	if err != nil {
		l, _ = generator.Preset("snowflake")
		workers = nil // nothing joins: the counter's workers are nominal
	}
	join = make([]bool, max(1, len(workers)))
	if l.Order == generator.SeqNode {
		// A worker's IDs in one unit step by the node fields: every ID
		// is a run of its own, and none meet.
		return 1, join
	}
	for j := 1; j < len(workers); j++ {
		join[j] = workers[j] == workers[j-1]+1
	}
	// A unit's last block meets the next unit's first only when the node
	// holds the lowest and the highest node fields (the carry into the
	// time field lands on node fields 0).
	if len(workers) > 0 {
		top := uint64(1)<<(l.DatacenterBits+l.WorkerBits) - 1
		join[0] = workers[0] == 0 && uint64(workers[len(workers)-1]) == top
	}
	return l.PerUnit(), join
}

// NextRange takes count IDs from the counter, as NextIDs does, and returns
// them as the runs a node would (see NoopOptions.Workers), without making
// them.
func (s *noopService) NextRange(_ context.Context, req *firnv1.NextRangeRequest) (*firnv1.NextRangeResponse, error) {
	if err := s.checkGenerator(req.GetGenerator()); err != nil {
		return nil, err
	}
	n := req.GetCount()
	if n < 1 || n > s.maxRange {
		return nil, status.Errorf(codes.InvalidArgument, "count %d outside [1, %d] (max_range)", n, s.maxRange)
	}
	first := s.next.Add(n) - n
	if s.kind == kindSegment {
		cut := []generator.Run{{First: first, Count: n}}
		if d := s.dupAt; d != 0 {
			cut = injectDuplicate(cut, d)
		}
		return rangeResponse(cut), nil
	}
	cut := make([]generator.Run, 0, n/s.block+2)
	k := uint64(len(s.join))
	for left := n; left > 0; {
		// Past the first, every block starts aligned.
		c := min(left, s.block-first%s.block)
		if last := len(cut) - 1; last >= 0 && s.join[first/s.block%k] {
			cut[last].Count += c
		} else {
			cut = append(cut, generator.Run{First: first, Count: c})
		}
		first, left = first+c, left-c
	}
	if d := s.dupAt; d != 0 {
		cut = injectDuplicate(cut, d)
	}
	return rangeResponse(cut), nil
}

// rangeResponse is NextRange's answer of runs cut.
func rangeResponse(cut []generator.Run) *firnv1.NextRangeResponse {
	// One slab for the messages: the floor allocates what a node must.
	slab := make([]firnv1.Run, len(cut))
	runs := make([]*firnv1.Run, len(cut))
	for i, r := range cut {
		slab[i].First, slab[i].Count = r.First, r.Count
		runs[i] = &slab[i]
	}
	return &firnv1.NextRangeResponse{Runs: runs}
}

// injectDuplicate hands out ID d-1 in place of d, if a run holds d,
// splitting that run (the response then breaks NextRange's order too).
func injectDuplicate(runs []generator.Run, d uint64) []generator.Run {
	for i, r := range runs {
		if d < r.First || d-r.First >= r.Count {
			continue
		}
		var parts []generator.Run
		if d > r.First {
			parts = append(parts, generator.Run{First: r.First, Count: d - r.First})
		}
		parts = append(parts, generator.Run{First: d - 1, Count: 1})
		if rest := r.First + r.Count - d - 1; rest > 0 {
			parts = append(parts, generator.Run{First: d + 1, Count: rest})
		}
		return slices.Replace(runs, i, i+1, parts...)
	}
	return runs
}

// checkSeqItem is the node's validation of one sequence item (count 0
// means 1); the error is the message a node gives.
func checkSeqItem(key []byte, count uint32) (uint64, error) {
	n := uint64(max(count, 1))
	if err := seq.CheckKey(key); err != nil {
		return 0, err
	}
	if err := seq.CheckCount(n); err != nil {
		return 0, err
	}
	return n, nil
}

// checkSeqGenerator refuses a call for another name or a generator of
// another kind, as the node does.
func (s *noopService) checkSeqGenerator(name string) error {
	if err := s.checkGenerator(name); err != nil {
		return err
	}
	if s.kind != kindSeq {
		return status.Errorf(codes.InvalidArgument, "generator %q is a %s generator: NextSeq, NextSeqs and CurrentSeq serve sequence generators", s.name, s.kind)
	}
	return nil
}

// NextSeq takes count values from the counter (see noopService).
func (s *noopService) NextSeq(_ context.Context, req *firnv1.NextSeqRequest) (*firnv1.NextSeqResponse, error) {
	if err := s.checkSeqGenerator(req.GetGenerator()); err != nil {
		return nil, err
	}
	n, err := checkSeqItem(req.GetKey(), req.GetCount())
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	return &firnv1.NextSeqResponse{First: s.next.Add(n) - n, Count: uint32(n)}, nil
}

// NextSeqs takes every valid item's values from the counter in one add;
// an invalid item is refused alone (BAD_REQUEST), as a node's is.
func (s *noopService) NextSeqs(_ context.Context, req *firnv1.NextSeqsRequest) (*firnv1.NextSeqsResponse, error) {
	if err := s.checkSeqGenerator(req.GetGenerator()); err != nil {
		return nil, err
	}
	items := req.GetItems()
	if len(items) < 1 || len(items) > seq.MaxItems {
		return nil, status.Errorf(codes.InvalidArgument, "%d items: a call carries 1 to %d", len(items), seq.MaxItems)
	}
	// One slab for the results, as the node's.
	out := make([]firnv1.SeqResult, len(items))
	resp := &firnv1.NextSeqsResponse{Results: make([]*firnv1.SeqResult, len(items))}
	var total uint64
	for i, it := range items {
		n, err := checkSeqItem(it.GetKey(), it.GetCount())
		if err != nil {
			out[i].Reason, out[i].Error = "BAD_REQUEST", err.Error()
		} else {
			out[i].Count = uint32(n)
			total += n
		}
		resp.Results[i] = &out[i]
	}
	next := s.next.Add(total) - total
	for i := range out {
		if out[i].Count > 0 {
			out[i].First = next
			next += uint64(out[i].Count)
		}
	}
	return resp, nil
}

// CurrentSeq is the counter's last value: at or above every value handed
// out, for any key.
func (s *noopService) CurrentSeq(_ context.Context, req *firnv1.CurrentSeqRequest) (*firnv1.CurrentSeqResponse, error) {
	if err := s.checkSeqGenerator(req.GetGenerator()); err != nil {
		return nil, err
	}
	if err := seq.CheckKey(req.GetKey()); err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	return &firnv1.CurrentSeqResponse{Value: s.next.Load() - 1}, nil
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
	layout := s.layout
	switch {
	case layout == "" && s.kind == kindSegment:
		layout = kindSegment
	case layout == "":
		layout = "noop counter"
	}
	g := &firnv1.GeneratorInfo{
		Name: s.name, Layout: layout, IsDefault: true, Serving: true,
		State: "serving", MaxBatch: s.maxBatch, IdsIssued: s.next.Load(), MaxRange: s.maxRange,
		Kind: "snowflake",
	}
	switch s.kind {
	case kindSeq:
		g.Kind, g.Layout, g.Sections = kindSeq, seq.Definition{Sections: s.sections}.String(), uint32(s.sections)
		g.MaxRange, g.MaxBatch = 0, 0
		g.SectionOwners = make([]*firnv1.SectionOwner, s.sections)
		for i := range g.SectionOwners {
			g.SectionOwners[i] = &firnv1.SectionOwner{Section: uint32(i), Address: s.addr, Node: "noop", Serving: true}
		}
	case kindSegment:
		g.Kind, g.CounterNext = kindSegment, s.next.Load()
	default:
		g.Worker, g.Datacenter = s.worker, s.dc
		g.Workers, g.WorkersWanted = s.workers, uint32(len(s.workers))
	}
	return &firnv1.InfoResponse{
		NodeName:    "noop",
		Version:     "noop",
		Coordinator: "none",
		Generators:  []*firnv1.GeneratorInfo{g},
	}, nil
}

// NoopMain runs the no-op floor server: the child process of
// `--target noop` (args are those after NoopCommand). It prints
// "firn-noop listening ADDR" on stdout once it listens, and serves until
// SIGINT/SIGTERM, or until its standard input closes when
// --exit-on-stdin-eof is given (so it never outlives its parent). It
// returns the process exit code.
func NoopMain(args []string, stdout, stderr io.Writer) int {
	fs := pflag.NewFlagSet(NoopCommand, pflag.ContinueOnError)
	fs.SetOutput(stderr)
	listen := fs.String("listen", "127.0.0.1:0", "listen address (loopback only)")
	certFile := fs.String("tls-cert", "", "server certificate (PEM); with --tls-key enables TLS")
	keyFile := fs.String("tls-key", "", "server key (PEM)")
	clientCA := fs.String("client-ca", "", "CA for client certificates (PEM); makes it mTLS")
	base := fs.Uint64("base", 1, "first ID issued")
	maxBatch := fs.Uint("max-batch", 100_000, "largest NextIDs count")
	dupAt := fs.Uint64("duplicate-at", 0, "hand out the ID before this one a second time in its place (tests the duplicate check)")
	layout := fs.String("layout", "", "layout Info reports and NextRange's runs follow (a preset or the canonical form; empty: \"noop counter\", runs as snowflake's)")
	workerList := fs.String("workers", "0", "workers Info reports, as Info's workers: node fields (datacenter × 2^worker_bits + worker), ascending, comma-separated; NextRange cuts runs as a node holding them")
	maxRange := fs.Uint64("max-range", defaultNoopMaxRange, "largest NextRange count")
	name := fs.String("generator", "default", "the generator's name (calls name it or none)")
	kind := fs.String("kind", "snowflake", "the generator's kind: snowflake, segment (NextRange returns one run per call; --layout is then the segment definition Info reports) or seq (NextSeq and NextSeqs from the counter; Info owns every section at the listen address)")
	sections := fs.Int("sections", seq.DefaultSections, "a seq generator's sections (Info)")
	stdinEOF := fs.Bool("exit-on-stdin-eof", false, "exit when standard input closes")
	heap := fs.Int64("heap", 0, "the live heap to run with, in bytes: the server's own, and the rest held for its life (no pointers: never scanned), so that it collects garbage as often per call as a process with that live heap")
	gogc := fs.Int("gogc", 0, "the GOGC to run at (0: the runtime's, from the environment or 100), so that with --heap it collects garbage at the node's heap goal")
	fail := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "firn-noop: "+format+"\n", a...)
		return 2
	}
	if err := fs.Parse(args); err != nil {
		return fail("%v", err)
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
	switch *kind {
	case "snowflake":
		if *layout != "" {
			if _, err := generator.ParseLayout(*layout); err != nil {
				return fail("--layout: %v", err)
			}
		}
	case kindSegment:
		if *layout != "" && !strings.HasPrefix(*layout, kindSegment) {
			return fail("--layout %q: a segment generator's definition starts with %q", *layout, kindSegment)
		}
	case kindSeq:
		if *sections < 1 || *sections > segment.MaxSections {
			return fail("--sections %d outside [1, %d]", *sections, segment.MaxSections)
		}
	default:
		return fail("--kind %q: want snowflake, segment or seq", *kind)
	}
	if *name == "" {
		return fail("--generator is empty")
	}
	workers, err := parseWorkers(*workerList)
	if err != nil {
		return fail("--workers %q: %v", *workerList, err)
	}
	if *maxRange < 1 {
		return fail("--max-range must be at least 1")
	}
	if *heap < 0 || *heap > 64<<30 {
		return fail("--heap %d outside [0, %d]", *heap, int64(64<<30))
	}
	if *gogc < 0 {
		return fail("--gogc %d: want 0 (the runtime's) or a percent above 0", *gogc)
	}
	if *gogc > 0 {
		debug.SetGCPercent(*gogc)
	}
	tlsConfig, err := serverTLS(*certFile, *keyFile, *clientCA)
	if err != nil {
		return fail("%v", err)
	}
	lis, err := net.Listen("tcp", *listen)
	if err != nil {
		return fail("listen: %v", err)
	}
	srv := NewNoopServer(tlsConfig, NoopOptions{Base: *base, MaxBatch: uint32(*maxBatch), DuplicateAt: *dupAt,
		Layout: *layout, Workers: workers, MaxRange: *maxRange, Name: *name, Kind: *kind,
		Sections: *sections, Address: lis.Addr().String()})
	own, held := holdHeap(*heap)
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
	fmt.Fprintf(stdout, "%s%s pid=%d own=%d held=%d\n", noopReady, lis.Addr(), os.Getpid(), own, held)
	if err := srv.Serve(lis); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
		fmt.Fprintf(stderr, "firn-noop: serve: %v\n", err)
		return 1
	}
	return 0
}

// holdHeap makes the process's live heap total bytes: it collects, reads
// what the server holds live by itself (own: the binary's package state,
// the gRPC server), and holds the rest (held), none where own is already
// more. Held in a package variable: live for Go's pacer (which sets the
// next collection's goal from the live heap), never scanned (no
// pointers), untouched (no resident pages). The node's live heap counts
// the same package state, so a no-op holding all of it on top of its own
// would collect less often per call than the node.
func holdHeap(total int64) (own, held int64) {
	runtime.GC()
	s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(s)
	if s[0].Value.Kind() == metrics.KindUint64 {
		own = int64(s[0].Value.Uint64())
	}
	held = max(total-own, 0)
	noopBallast = make([]byte, held)
	return own, held
}

// parseWorkers reads --workers: node-fields numbers, ascending,
// comma-separated.
func parseWorkers(s string) ([]uint32, error) {
	var ws []uint32
	for part := range strings.SplitSeq(s, ",") {
		w, err := strconv.ParseUint(strings.TrimSpace(part), 10, 32)
		if err != nil {
			return nil, fmt.Errorf("%q is not a worker ID", part)
		}
		if len(ws) > 0 && uint32(w) <= ws[len(ws)-1] {
			return nil, errors.New("not ascending")
		}
		ws = append(ws, uint32(w))
	}
	return ws, nil
}

// formatWorkers is parseWorkers' input for ws.
func formatWorkers(ws []uint32) string {
	parts := make([]string, len(ws))
	for i, w := range ws {
		parts[i] = strconv.FormatUint(uint64(w), 10)
	}
	return strings.Join(parts, ",")
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
	// heap is the live heap it runs with (--heap), heapFrom where that
	// came from; own is its own part of it, as it reported (-1: not
	// reported), the rest held.
	heap     int64
	heapFrom string
	gogc     int
	own      int64
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
			var fields []string
			c.addr, c.own = rest, -1
			if f := strings.Fields(rest); len(f) > 0 {
				c.addr, fields = f[0], f[1:]
			}
			for _, f := range fields {
				if v, ok := strings.CutPrefix(f, "own="); ok {
					if n, err := strconv.ParseInt(v, 10, 64); err == nil {
						c.own = n
					}
				}
			}
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
