package cluster

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	firnv1 "github.com/firnid/firn/client/firnv1"
	"github.com/firnid/firn/internal/seqcheck"
	"github.com/firnid/firn/seq"
)

// SeqCall is one key's values a sequence load received: the checker's
// call, and which node (and process of it) answered, for which section.
type SeqCall struct {
	seqcheck.Call
	Node    string
	Run     int // the node's process (Node.Run); 0 where a restart came between
	Section int
	Batch   bool // an item of a NextSeqs call
}

// SeqCurrent is one CurrentSeq answer.
type SeqCurrent struct {
	Key        string
	Value      uint64
	Start, End time.Duration
	Node       string
}

// SeqLoadOptions shape a sequence load.
type SeqLoadOptions struct {
	Generator string
	Sections  int
	Keys      int           // keys "k<n>", n uniform in [0, Keys)
	Callers   int           // in all, not per node
	Deadline  time.Duration // per call, every hop and retry inside it
	// AttemptTimeout bounds one hop of a call (0: what is left of its
	// deadline); a hop that times out goes to another node, as one
	// refused in transport does.
	AttemptTimeout time.Duration
	Pause          time.Duration // between one caller's calls
	// Of every 100 calls, BatchPct are NextSeqs of BatchKeys keys (split
	// by owner, one call to each) and CurrentPct are CurrentSeq; the rest
	// NextSeq.
	BatchPct, BatchKeys, CurrentPct int
	// Hot, when set, is a key one more caller asks for values of, call
	// after call (NextSeq, 1–3 values, HotPause between calls): a busy
	// conversation, whose values climb through its section's write-ahead
	// steps (the raises, and the calls that wait for them) where the
	// 10,000 others each get a few values.
	Hot      string
	HotPause time.Duration
}

// SeqLoad drives a sequence generator's nodes with callers that route
// each key to its section's owner: the section map learnt from Info
// (read every 300 ms from one node after another), a WRONG_NODE refusal
// followed to the owner it names, a SECTION_MOVING one retried within
// the call's deadline, a node that refuses whole (starting, draining) or
// cannot be reached left for another. Every call that returned values is
// kept with its start and end on one clock (the load's start), for
// seqcheck; a call that failed by its deadline goes to the scenario's
// Recorder as its last hop failed (a refusal with its cause, the
// transport's error, or the deadline), or where that was a WRONG_NODE
// redirect, as the last hop before it that was not.
type SeqLoad struct {
	o      SeqLoadOptions
	nodes  []*Node
	byName map[string]*Node
	byAddr map[string]string
	fails  *Recorder
	base   time.Time

	mu       sync.Mutex
	owner    []string // section → node name, "" unknown
	calls    []SeqCall
	currents []SeqCurrent
	hops     int // WRONG_NODE refusals followed

	cancel context.CancelFunc
	wg     sync.WaitGroup
	stop   atomic.Bool
}

// StartSeqLoad starts the callers and the map reader.
func StartSeqLoad(fails *Recorder, nodes []*Node, o SeqLoadOptions) *SeqLoad {
	if o.Keys == 0 {
		o.Keys = 10_000
	}
	if o.Callers == 0 {
		o.Callers = 6
	}
	if o.Deadline == 0 {
		o.Deadline = 2 * time.Second // the scenarios' call deadline
	}
	if o.BatchKeys == 0 {
		o.BatchKeys = 20
	}
	// The callers' calls are never cancelled (Drain lets each end by its
	// answer or its deadline); ctx ends the map reader.
	ctx, cancel := context.WithCancel(context.Background())
	calls := context.Background()
	l := &SeqLoad{o: o, nodes: nodes, byName: map[string]*Node{}, byAddr: map[string]string{}, fails: fails,
		base: time.Now(), owner: make([]string, o.Sections), cancel: cancel}
	for _, n := range nodes {
		l.byName[n.Name] = n
		l.byAddr[n.GRPCAddr] = n.Name
	}
	l.readMap(ctx, 0)
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		for i := 1; ctx.Err() == nil; i++ {
			select {
			case <-ctx.Done():
				return
			case <-time.After(300 * time.Millisecond):
			}
			l.readMap(ctx, i)
		}
	}()
	if o.Hot != "" {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			c := o.Callers // the hot caller's number
			rng := rand.New(rand.NewPCG(uint64(c), uint64(l.base.UnixNano())))
			for !l.stop.Load() {
				l.nextKey(calls, rng, c, o.Hot)
				time.Sleep(o.HotPause)
			}
		}()
	}
	for c := range o.Callers {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			rng := rand.New(rand.NewPCG(uint64(c), uint64(l.base.UnixNano())))
			for !l.stop.Load() {
				switch p := rng.IntN(100); {
				case p < o.BatchPct:
					l.nextSeqs(calls, rng, c)
				case p < o.BatchPct+o.CurrentPct:
					l.current(calls, rng, c)
				default:
					l.next(calls, rng, c)
				}
				if o.Pause > 0 {
					time.Sleep(o.Pause)
				}
			}
		}()
	}
	return l
}

// Drain ends the load without cancelling a call under way: every answer
// to a call sent is kept.
func (l *SeqLoad) Drain() {
	l.stop.Store(true)
	l.cancel() // the map reader
	l.wg.Wait()
}

// now is the load's clock.
func (l *SeqLoad) now() time.Duration { return time.Since(l.base) }

// At is t on the load's clock.
func (l *SeqLoad) At(t time.Time) time.Duration { return t.Sub(l.base) }

func (l *SeqLoad) key(rng *rand.Rand) string { return fmt.Sprintf("k%d", rng.IntN(l.o.Keys)) }

func (l *SeqLoad) section(key string) int {
	return seq.Definition{Sections: l.o.Sections}.Section(seq.Hash([]byte(key)))
}

// readMap learns the section map from the i-th node's Info (in turn).
func (l *SeqLoad) readMap(ctx context.Context, i int) {
	n := l.nodes[i%len(l.nodes)]
	cctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	info, err := n.ID.Info(cctx, &firnv1.InfoRequest{})
	if err != nil {
		return
	}
	for _, g := range info.GetGenerators() {
		if g.GetName() != l.o.Generator {
			continue
		}
		l.mu.Lock()
		for _, o := range g.GetSectionOwners() {
			if s := int(o.GetSection()); s < len(l.owner) {
				l.owner[s] = l.byAddr[o.GetAddress()]
			}
		}
		l.mu.Unlock()
	}
}

// Owners is the section map as the load last learnt it.
func (l *SeqLoad) Owners() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.owner...)
}

func (l *SeqLoad) ownerOf(s int) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.owner[s]
}

func (l *SeqLoad) learn(s int, node string) {
	if node == "" {
		return
	}
	l.mu.Lock()
	l.owner[s] = node
	l.hops++
	l.mu.Unlock()
}

// other is a node other than not, at random.
func (l *SeqLoad) other(rng *rand.Rand, not string) string {
	for {
		n := l.nodes[rng.IntN(len(l.nodes))].Name
		if n != not || len(l.nodes) == 1 {
			return n
		}
	}
}

// target is where a call for section s goes first: its owner as last
// learnt, or any node.
func (l *SeqLoad) target(rng *rand.Rand, s int) string {
	if o := l.ownerOf(s); o != "" {
		return o
	}
	return l.nodes[rng.IntN(len(l.nodes))].Name
}

// minHop is the least time a call starts a hop with: with less left it
// fails as its last hop did. A hop that ends at the call's deadline has
// hung for minHop at least (a loopback call takes about a millisecond),
// and is recorded so: without an answer from the node.
const minHop = 250 * time.Millisecond

// hop is the decision after one refused attempt: the next node, and how
// long to wait first.
type hop struct {
	next string
	wait time.Duration
}

// route decides the next hop after err from node for section s.
func (l *SeqLoad) route(rng *rand.Rand, s int, node string, err error, wrongInRow *int) hop {
	ei := errorInfoOf(err)
	switch {
	case ei != nil && ei.GetReason() == "WRONG_NODE":
		owner := l.byAddr[ei.GetMetadata()["owner"]]
		l.learn(s, owner)
		*wrongInRow++
		w := time.Duration(0)
		if *wrongInRow > 3 {
			w = 20 * time.Millisecond // two nodes naming each other for a moment
		}
		if owner == "" {
			return hop{next: l.other(rng, node), wait: w}
		}
		return hop{next: owner, wait: w}
	case ei != nil && ei.GetReason() == "SECTION_MOVING":
		*wrongInRow = 0
		next := l.ownerOf(s)
		if next == "" {
			next = node
		}
		return hop{next: next, wait: 50 * time.Millisecond}
	case ei != nil:
		// The node refuses whole (starting, draining, its coordinator
		// lost): the map may be stale; another node names the owner.
		*wrongInRow = 0
		return hop{next: l.other(rng, node), wait: 50 * time.Millisecond}
	default:
		// Not reached, or no answer in time.
		*wrongInRow = 0
		return hop{next: l.other(rng, node), wait: 20 * time.Millisecond}
	}
}

// reasonOf is err's ErrorInfo reason, or its gRPC code.
func reasonOf(err error) string {
	if ei := errorInfoOf(err); ei != nil {
		return ei.GetReason()
	}
	return status.Code(err).String()
}

func errorInfoOf(err error) *errdetails.ErrorInfo {
	st, _ := status.FromError(err)
	for _, d := range st.Details() {
		if ei, ok := d.(*errdetails.ErrorInfo); ok {
			return ei
		}
	}
	return nil
}

// attempt runs one hop of a call to node, within the call's deadline.
func (l *SeqLoad) attempt(ctx context.Context, deadline time.Time, node string, f func(ctx context.Context, c firnv1.IDServiceClient) error) (run int, err error) {
	n := l.byName[node]
	d := time.Until(deadline)
	if l.o.AttemptTimeout > 0 {
		d = min(d, l.o.AttemptTimeout)
	}
	actx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	run = n.Run()
	err = f(actx, n.ID)
	if n.Run() != run {
		run = 0
	}
	return run, err
}

// routed runs one single-key call (NextSeq or CurrentSeq) to its owner,
// hop after hop until it is answered or its deadline passes; a failure is
// recorded as its last hop failed. It returns the answering node and
// process, or ok false.
func (l *SeqLoad) routed(ctx context.Context, rng *rand.Rand, s int, count uint64,
	f func(ctx context.Context, c firnv1.IDServiceClient) error) (node string, run int, ok bool) {
	deadline := time.Now().Add(l.o.Deadline)
	node = l.target(rng, s)
	wrong := 0
	var it seqItem // the hops' failures
	for {
		run, err := l.attempt(ctx, deadline, node, f)
		if err == nil {
			return node, run, true
		}
		if ctx.Err() != nil {
			return "", 0, false // the load was stopped
		}
		h := l.route(rng, s, node, err, &wrong)
		it.fail(err, node)
		if time.Until(deadline) < h.wait+minHop {
			// Out of time: the failure is the last hop's (a refusal and
			// its cause, or the transport's, or the deadline's when the
			// hop got no answer in time: it hung for minHop at least), or
			// the last before it where that was a redirect.
			err, at := it.failure()
			l.fails.addFailure(at, l.o.Generator, count, err, time.Now())
			return "", 0, false
		}
		if h.wait > 0 {
			time.Sleep(h.wait)
		}
		node = h.next
	}
}

// next is one NextSeq of 1–3 values of a random key.
func (l *SeqLoad) next(ctx context.Context, rng *rand.Rand, caller int) {
	l.nextKey(ctx, rng, caller, l.key(rng))
}

// nextKey is one NextSeq of 1–3 values of key.
func (l *SeqLoad) nextKey(ctx context.Context, rng *rand.Rand, caller int, key string) {
	s := l.section(key)
	count := uint64(1 + rng.IntN(3))
	start := l.now()
	var resp *firnv1.NextSeqResponse
	node, run, ok := l.routed(ctx, rng, s, count, func(ctx context.Context, c firnv1.IDServiceClient) (err error) {
		resp, err = c.NextSeq(ctx, &firnv1.NextSeqRequest{Generator: l.o.Generator, Key: []byte(key), Count: uint32(count)})
		return err
	})
	if !ok {
		return
	}
	end := l.now()
	got := uint64(resp.GetCount())
	if got != count {
		// Recorded as given: the checker sees what was answered.
		l.fails.addFailure(node, l.o.Generator, count, status.Errorf(codes.Internal, "NextSeq(%q, %d) answered %d values", key, count, got), time.Now())
	}
	l.add(SeqCall{Call: seqcheck.Call{Key: key, First: resp.GetFirst(), Count: got, Start: start, End: end,
		Who: fmt.Sprintf("caller %d via %s", caller, node)}, Node: node, Run: run, Section: s})
}

// current is one CurrentSeq of a random key.
func (l *SeqLoad) current(ctx context.Context, rng *rand.Rand, caller int) {
	key := l.key(rng)
	s := l.section(key)
	start := l.now()
	var resp *firnv1.CurrentSeqResponse
	node, _, ok := l.routed(ctx, rng, s, 1, func(ctx context.Context, c firnv1.IDServiceClient) (err error) {
		resp, err = c.CurrentSeq(ctx, &firnv1.CurrentSeqRequest{Generator: l.o.Generator, Key: []byte(key)})
		return err
	})
	if !ok {
		return
	}
	l.mu.Lock()
	l.currents = append(l.currents, SeqCurrent{Key: key, Value: resp.GetValue(), Start: start, End: l.now(), Node: node})
	l.mu.Unlock()
}

// seqItem is one key of a NextSeqs call under way.
type seqItem struct {
	key   string
	s     int
	count uint64
	node  string // where it goes next
	// The last hop's failure, and the last that was not a WRONG_NODE
	// redirect, and their nodes.
	last, cause     error
	lastAt, causeAt string
}

func (it *seqItem) fail(err error, node string) {
	it.last, it.lastAt = err, node
	if !isRedirect(err) {
		it.cause, it.causeAt = err, node
	}
}

// failure is what the item fails with: its last hop's failure, or where
// that was a WRONG_NODE redirect, the last failure before it that was not
// (a redirect is no cause: the owner it names was starting, moving, or
// not reached).
func (it *seqItem) failure() (error, string) {
	if isRedirect(it.last) && it.cause != nil {
		return it.cause, it.causeAt
	}
	return it.last, it.lastAt
}

func isRedirect(err error) bool {
	ei := errorInfoOf(err)
	return ei != nil && ei.GetReason() == "WRONG_NODE"
}

// resultErr is a refused NextSeqs item as the error a NextSeq of its key
// would have returned: its code, message and reason.
func resultErr(r *firnv1.SeqResult) error {
	code := codes.Unavailable
	switch r.GetReason() {
	case "WRONG_NODE":
		code = codes.FailedPrecondition
	case "BAD_REQUEST":
		code = codes.InvalidArgument
	}
	st, _ := status.New(code, r.GetError()).WithDetails(&errdetails.ErrorInfo{Reason: r.GetReason(), Domain: "firn.v1.IDService"})
	return st.Err()
}

// nextSeqs asks for BatchKeys distinct random keys, 1–3 values each: one
// NextSeqs per owner, the items refused retried (WRONG_NODE at the owner
// named, the others after a pause) until the call's deadline.
func (l *SeqLoad) nextSeqs(ctx context.Context, rng *rand.Rand, caller int) {
	type item = seqItem
	seen := map[string]bool{}
	var pending []*item
	for len(pending) < l.o.BatchKeys {
		k := l.key(rng)
		if seen[k] {
			continue
		}
		seen[k] = true
		s := l.section(k)
		pending = append(pending, &item{key: k, s: s, count: uint64(1 + rng.IntN(3)), node: l.target(rng, s)})
	}
	start := l.now()
	deadline := time.Now().Add(l.o.Deadline)
	wrong := 0
	for len(pending) > 0 {
		groups := map[string][]*item{}
		var order []string
		for _, it := range pending {
			if groups[it.node] == nil {
				order = append(order, it.node)
			}
			groups[it.node] = append(groups[it.node], it)
		}
		sort.Strings(order)
		var left []*item
		wait := time.Duration(0)
		for _, node := range order {
			its := groups[node]
			req := &firnv1.NextSeqsRequest{Generator: l.o.Generator}
			for _, it := range its {
				req.Items = append(req.Items, &firnv1.SeqItem{Key: []byte(it.key), Count: uint32(it.count)})
			}
			var resp *firnv1.NextSeqsResponse
			run, err := l.attempt(ctx, deadline, node, func(ctx context.Context, c firnv1.IDServiceClient) (err error) {
				resp, err = c.NextSeqs(ctx, req)
				return err
			})
			if ctx.Err() != nil {
				return
			}
			end := l.now()
			if err == nil && len(resp.GetResults()) != len(its) {
				err = status.Errorf(codes.Internal, "NextSeqs of %d items answered %d results", len(its), len(resp.GetResults()))
			}
			if err != nil {
				// The whole call refused (the node starting or draining) or
				// not answered: every item goes to another node.
				h := l.route(rng, its[0].s, node, err, &wrong)
				for _, it := range its {
					it.node = l.other(rng, node)
					it.fail(err, node)
				}
				wait = max(wait, h.wait)
				left = append(left, its...)
				continue
			}
			for i, r := range resp.GetResults() {
				it := its[i]
				switch r.GetReason() {
				case "":
					l.add(SeqCall{Call: seqcheck.Call{Key: it.key, First: r.GetFirst(), Count: uint64(r.GetCount()), Start: start, End: end,
						Who: fmt.Sprintf("caller %d via %s (NextSeqs)", caller, node)}, Node: node, Run: run, Section: it.s, Batch: true})
					if uint64(r.GetCount()) != it.count {
						l.fails.addFailure(node, l.o.Generator, it.count, status.Errorf(codes.Internal, "NextSeqs item %q count %d answered %d values", it.key, it.count, r.GetCount()), time.Now())
					}
					continue
				case "WRONG_NODE":
					owner := l.byAddr[r.GetOwner()]
					l.learn(it.s, owner)
					if owner == "" {
						owner = l.other(rng, node)
					}
					it.node = owner
				case "SECTION_MOVING":
					it.node = l.target(rng, it.s)
					wait = max(wait, 50*time.Millisecond)
				default:
					it.node = l.other(rng, node)
					wait = max(wait, 50*time.Millisecond)
				}
				it.fail(resultErr(r), node)
				left = append(left, it)
			}
		}
		pending = left
		if len(pending) == 0 {
			return
		}
		if time.Until(deadline) < wait+minHop {
			// The call failed: the items left, with the cause the first of
			// them was last given.
			it := pending[0]
			err, at := it.failure()
			var n uint64
			for _, it := range pending {
				n += it.count
			}
			l.fails.addFailure(at, l.o.Generator, n, err, time.Now())
			return
		}
		if wait > 0 {
			time.Sleep(wait)
		}
	}
}

func (l *SeqLoad) add(c SeqCall) {
	l.mu.Lock()
	l.calls = append(l.calls, c)
	l.mu.Unlock()
}

// Calls is every call that returned values.
func (l *SeqLoad) Calls() []SeqCall {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]SeqCall(nil), l.calls...)
}

// Currents is every CurrentSeq answer.
func (l *SeqLoad) Currents() []SeqCurrent {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]SeqCurrent(nil), l.currents...)
}

// Hops is how many WRONG_NODE refusals the callers followed.
func (l *SeqLoad) Hops() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.hops
}

// CheckCurrents returns the CurrentSeq answers below a value of their
// key that a call returned before they began (at most limit).
func CheckCurrents(calls []SeqCall, currents []SeqCurrent, limit int) []string {
	byKey := map[string][]SeqCall{}
	for _, c := range calls {
		byKey[c.Key] = append(byKey[c.Key], c)
	}
	for k, cs := range byKey {
		sort.Slice(cs, func(i, j int) bool { return cs[i].End < cs[j].End })
		byKey[k] = cs
	}
	var out []string
	for _, cur := range currents {
		cs := byKey[cur.Key]
		// The calls that returned before it began: a prefix by End.
		n := sort.Search(len(cs), func(i int) bool { return cs[i].End >= cur.Start })
		for _, c := range cs[:n] {
			if c.Last() > cur.Value {
				out = append(out, fmt.Sprintf("CurrentSeq of key %q answered %d by %s (began %v, returned %v), below %v, which returned before it began",
					cur.Key, cur.Value, cur.Node, cur.Start, cur.End, c.Call))
				break
			}
		}
		if limit > 0 && len(out) >= limit {
			break
		}
	}
	return out
}
