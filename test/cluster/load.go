package cluster

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	firnv1 "github.com/firnid/firn/client/firnv1"
)

// Received is one ID a load client got.
type Received struct {
	ID        uint64
	Node      string
	Generator string
	Sent      time.Time // the client's wall clock when the call began (zero: At)
	At        time.Time // the client's wall clock at receipt
	Call      int64     // per-client call number: order of issue per caller
	Client    int
	// Run is the node's process (Node.Run: its start count) that answered,
	// 0 where unknown: a restart came between the call's start and its
	// answer, or the ID came through the Go client. A segment generator's
	// IDs increase per caller within one process only (a restarted
	// process gives out handed-back remainders first, below them).
	Run int
}

// Failure is one failed call.
type Failure struct {
	Node string
	// Generator is the generator the call asked for ("" for the node's
	// default), Count how many IDs.
	Generator string
	Count     uint64
	Code      codes.Code
	Msg       string
	At        time.Time
	// Reason is the ErrorInfo reason the node gave ("" for none: a
	// transport failure, a caller's deadline, or a refusal without a
	// cause).
	Reason string
}

// causeless reports whether f is a refusal a node sent without naming
// its cause: every refusal of a serving process carries an ErrorInfo
// reason, so only a failure of the transport (a node killed, stopped or
// cut off) or of the caller's own deadline may lack one.
func (f Failure) causeless() bool {
	if f.Reason != "" {
		return false
	}
	switch f.Code {
	case codes.DeadlineExceeded, codes.Canceled:
		return false // the caller's deadline: the node may say nothing
	case codes.Unavailable:
		// A node's own refusal (core.NotServingError's "generator %q not
		// serving: …", the generator's and the ring's errors) is no failure
		// of the transport, whatever its cause quotes: a coordinator's
		// "connection refused", a read's "EOF".
		for _, node := range []string{"generator ", "generator:", "ringbuffer:"} {
			if strings.HasPrefix(f.Msg, node) {
				return true
			}
		}
		for _, transport := range []string{"connection error", "error reading from server", "transport is closing",
			"connection refused", "client connection is closing", "EOF", "connection reset", "broken pipe", "no children to pick from"} {
			if strings.Contains(f.Msg, transport) {
				return false
			}
		}
	}
	return true
}

// unknownOutcome reports whether f may have been given IDs the caller
// never received: the caller's deadline passed, or the connection broke
// once the call was sent. A refusal with a cause, or a connection never
// made, took nothing.
func (f Failure) unknownOutcome() bool {
	switch {
	case f.Reason != "":
		return false
	case f.Code == codes.DeadlineExceeded, f.Code == codes.Canceled:
		return true
	case f.Code == codes.Unavailable:
		return !strings.Contains(f.Msg, "connection refused") && !strings.Contains(f.Msg, "while dialing")
	}
	return true
}

// Recorder collects every ID and failure of a scenario.
type Recorder struct {
	mu sync.Mutex
	// ids are kept in chunks of recorderChunk: a scenario records millions
	// (3.6 M in one), and one growing slice was copied whole at each
	// growth — under the race detector, which checks every byte a copy
	// touches, most of a long scenario's time.
	ids      [][]Received
	n        int
	failures []Failure
	calls    atomic.Int64
	clients  atomic.Int64 // numbers callers uniquely across loads
}

func (r *Recorder) addIDs(node, gen string, client int, call int64, ids []uint64, sent, at time.Time) {
	r.addRun(node, gen, 0, client, call, ids, sent, at)
}

// addRun is addIDs answered by the node's process run (0: unknown).
func (r *Recorder) addRun(node, gen string, run, client int, call int64, ids []uint64, sent, at time.Time) {
	r.mu.Lock()
	for _, id := range ids {
		if k := len(r.ids); k == 0 || len(r.ids[k-1]) == cap(r.ids[k-1]) {
			r.ids = append(r.ids, make([]Received, 0, recorderChunk))
		}
		last := &r.ids[len(r.ids)-1]
		*last = append(*last, Received{ID: id, Node: node, Generator: gen, Sent: sent, At: at, Call: call, Client: client, Run: run})
	}
	r.n += len(ids)
	r.mu.Unlock()
}

// recorderChunk is how many IDs one chunk of a Recorder holds.
const recorderChunk = 1 << 16

func (r *Recorder) addFailure(node, gen string, count uint64, err error, at time.Time) {
	st := status.Convert(err)
	if st.Code() == codes.Unknown && (errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled)) {
		st = status.FromContextError(err) // the Go client returns the caller's own context error
	}
	f := Failure{Node: node, Generator: gen, Count: count, Code: st.Code(), Msg: st.Message(), At: at}
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok {
			f.Reason = info.GetReason()
		}
	}
	r.mu.Lock()
	r.failures = append(r.failures, f)
	r.mu.Unlock()
}

// Count is how many IDs were received.
func (r *Recorder) Count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.n
}

// IDs returns a copy of everything received.
func (r *Recorder) IDs() []Received {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]Received, 0, r.n)
	for _, c := range r.ids {
		out = append(out, c...)
	}
	return out
}

// Failures returns a copy of every failure.
func (r *Recorder) Failures() []Failure {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Failure(nil), r.failures...)
}

// FailuresBetween counts failures in [from, to).
func (r *Recorder) FailuresBetween(from, to time.Time) []Failure {
	var out []Failure
	for _, f := range r.Failures() {
		if !f.At.Before(from) && f.At.Before(to) {
			out = append(out, f)
		}
	}
	return out
}

// Load drives nodes with concurrent callers until Stop.
type Load struct {
	rec    *Recorder
	cancel context.CancelFunc
	wg     sync.WaitGroup
	// draining: the callers send no new call (Drain).
	draining atomic.Bool
}

// LoadOptions shape a load.
type LoadOptions struct {
	Callers   int           // concurrent callers per node
	Batch     int           // 0: unary NextID; else NextIDs(count=Batch)
	Range     uint64        // non-zero: NextRange(count=Range), the runs expanded
	Deadline  time.Duration // per call (>= 2s where absorption is asserted)
	Generator string
	Pause     time.Duration // between calls of one caller (0: none)
}

// StartLoad starts callers against every node; IDs go to rec.
func StartLoad(rec *Recorder, nodes []*Node, o LoadOptions) *Load {
	if o.Callers == 0 {
		o.Callers = 4
	}
	if o.Deadline == 0 {
		o.Deadline = 2 * time.Second
	}
	ctx, cancel := context.WithCancel(context.Background())
	l := &Load{rec: rec, cancel: cancel}
	for _, n := range nodes {
		for i := 0; i < o.Callers; i++ {
			n, c := n, int(rec.clients.Add(1))
			l.wg.Add(1)
			go func() {
				defer l.wg.Done()
				var call int64
				for ctx.Err() == nil && !l.draining.Load() {
					call++
					run := n.Run()
					sent := time.Now()
					cctx, ccancel := context.WithTimeout(ctx, o.Deadline)
					var ids []uint64
					var err error
					switch {
					case o.Range > 0:
						var r *firnv1.NextRangeResponse
						r, err = n.ID.NextRange(cctx, &firnv1.NextRangeRequest{Generator: o.Generator, Count: o.Range})
						for _, run := range r.GetRuns() {
							for i := range run.GetCount() {
								ids = append(ids, run.GetFirst()+i)
							}
						}
						if err == nil && uint64(len(ids)) != o.Range {
							err = fmt.Errorf("NextRange(%d) returned %d IDs", o.Range, len(ids))
						}
					case o.Batch == 0:
						var r *firnv1.NextIDResponse
						r, err = n.ID.NextID(cctx, &firnv1.NextIDRequest{Generator: o.Generator})
						if err == nil {
							ids = []uint64{r.GetId()}
						}
					default:
						var r *firnv1.NextIDsResponse
						r, err = n.ID.NextIDs(cctx, &firnv1.NextIDsRequest{Generator: o.Generator, Count: uint32(o.Batch)})
						if err == nil {
							ids = r.GetIds()
						}
					}
					ccancel()
					at := time.Now()
					rec.calls.Add(1)
					if err != nil {
						if ctx.Err() != nil {
							return // the load was stopped mid-call
						}
						count := uint64(1)
						if o.Range > 0 {
							count = o.Range
						} else if o.Batch > 0 {
							count = uint64(o.Batch)
						}
						rec.addFailure(n.Name, o.Generator, count, err, at)
						time.Sleep(20 * time.Millisecond)
						continue
					}
					if n.Run() != run {
						run = 0 // a restart came between: either process may have answered
					}
					rec.addRun(n.Name, o.Generator, run, c, call, ids, sent, at)
					if o.Pause > 0 {
						time.Sleep(o.Pause)
					}
				}
			}()
		}
	}
	return l
}

// Stop ends the load and waits for every caller: a call in flight is
// cancelled, and what it may have been given is not recorded.
func (l *Load) Stop() {
	l.cancel()
	l.wg.Wait()
}

// Drain ends the load without cancelling a call in flight: the callers
// send no new call, and every answer to one sent is recorded. What the
// nodes handed out is then exactly what was recorded, but for calls that
// failed without a cause (a deadline, a broken connection): their outcome
// is unknown.
func (l *Load) Drain() {
	l.draining.Store(true)
	l.wg.Wait()
	l.cancel()
}

// ClientLoad drives the Go client (prefetch and failover) from callers that
// record what they receive; the serving node is unknown ("").
type ClientLoad struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// Nexter is the Go client's method the load needs.
type Nexter interface {
	Next(ctx context.Context) (uint64, error)
}

// StartClientLoad starts callers on one client.
func StartClientLoad(rec *Recorder, c Nexter, callers int, deadline time.Duration, pause time.Duration) *ClientLoad {
	ctx, cancel := context.WithCancel(context.Background())
	l := &ClientLoad{cancel: cancel}
	for i := 0; i < callers; i++ {
		id := int(rec.clients.Add(1))
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			var call int64
			for ctx.Err() == nil {
				call++
				sent := time.Now()
				cctx, ccancel := context.WithTimeout(ctx, deadline)
				v, err := c.Next(cctx)
				ccancel()
				at := time.Now()
				rec.calls.Add(1)
				if err != nil {
					if ctx.Err() != nil {
						return
					}
					rec.addFailure("client", "", 1, err, at)
					time.Sleep(20 * time.Millisecond)
					continue
				}
				rec.addIDs("", "", id, call, []uint64{v}, sent, at)
				if pause > 0 {
					time.Sleep(pause)
				}
			}
		}()
	}
	return l
}

// Stop ends the load.
func (l *ClientLoad) Stop() {
	l.cancel()
	l.wg.Wait()
}
