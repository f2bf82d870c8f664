package load

import (
	"context"
	"fmt"
	"math/rand"
	"net"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	firnv1 "github.com/firnid/firn/client/firnv1"
	"github.com/firnid/firn/internal/seqcheck"
	"github.com/firnid/firn/seq"
)

// The sequence modes (a sequence generator, `--generator NAME=seq`).
const (
	modeSeq  = "seq"  // NextSeq(key, --batch) per call
	modeSeqs = "seqs" // NextSeqs of --batch keys per call, one RPC per owner
)

// kindSeq is Info's kind of a sequence generator.
const kindSeq = "seq"

// Key distributions of the sequence modes.
const (
	distUniform = "uniform"
	distZipf    = "zipf"
)

// zipfS and zipfV are the zipf distribution's parameters (math/rand's
// Zipf: P(k) ∝ (zipfV + k)^-zipfS for k in [0, keys)): key 0 is the
// hottest. At 100,000 keys it takes about 13 % of the calls, the ten
// hottest about 36 %.
const (
	zipfS = 1.1
	zipfV = 1.0
)

// Bounds of the sequence flags.
const (
	maxSeqKeys = 1_000_000_000
	// maxSeqHops bounds the WRONG_NODE refusals one call follows (a map
	// that keeps moving under it: the call is then a failure).
	maxSeqHops = 3
	// maxViolations bounds the violations the check collects; the report
	// names the first violationSamples of them.
	maxViolations    = 1000
	violationSamples = 10
	// defaultSeqRecord is --seq-record's default: 4 Mi responses, 128 MiB.
	defaultSeqRecord = 1 << 22
)

// Reasons a sequence call is refused with (firn.proto's ErrorReason).
const (
	reasonWrongNode = "WRONG_NODE"
	reasonMoving    = "SECTION_MOVING"
)

func isSeqMode(mode string) bool { return mode == modeSeq || mode == modeSeqs }

// seqRecord is one response of the measured window kept for the checker
// (seqcheck): key index, values, the attempt's start and end on the run's
// monotonic clock, and the owner that answered. 32 bytes; the run
// preallocates --seq-record of them.
type seqRecord struct {
	first      uint64
	start, end int64 // ns since the run's origin
	key        uint32
	count      uint16 // ≤ seq.MaxCount
	who        uint16 // index into the router's owners
}

// SeqResult is what a sequence run measured beside the common figures.
type SeqResult struct {
	Generator string `json:"generator"`
	Keys      int    `json:"keys"`
	KeyDist   string `json:"key_dist"`
	Sections  int    `json:"sections"`
	// Owners are the owners' addresses the run called: those of Info's
	// section map, then those learned from WRONG_NODE refusals.
	Owners []string `json:"owners"`
	// WrongNode is the WRONG_NODE refusals followed (calls or items sent
	// again to the owner the refusal named); in steady state 0.
	WrongNode uint64 `json:"wrong_node_followed"`
	// SectionMoving is the calls (items in seqs mode) refused
	// SECTION_MOVING.
	SectionMoving uint64 `json:"section_moving"`
	// ItemErrors counts NextSeqs items refused, by reason (those calls
	// succeeded: the gRPC errors are Result.Errors).
	ItemErrors map[string]uint64 `json:"item_errors,omitempty"`
	// ItemsPerRPC: seqs mode, the items a NextSeqs call carried on
	// average (--batch split by owner).
	ItemsPerRPC float64 `json:"items_per_rpc,omitempty"`
	// Responses is the values' grants of the window (a NextSeq call, a
	// NextSeqs item); Checked how many of them the checker saw (at most
	// --seq-record).
	Responses   uint64 `json:"responses"`
	Checked     uint64 `json:"responses_checked"`
	CheckedKeys int    `json:"keys_checked"`
	// Violations is what seqcheck.Check found (at most maxViolations);
	// Samples names the first of them.
	Violations uint64   `json:"violations"`
	Samples    []string `json:"violation_samples,omitempty"`
	// NodeWrites is the node's sequence writes over the window
	// (--node-metrics).
	NodeWrites *SeqWrites `json:"node_writes,omitempty"`
}

// SeqWrites is a sequence generator's writes of its sections' persisted
// maxima over the window, from the node's firn_seq_writes_total, and the
// keys it keeps in memory (firn_seq_keys) at the window's close.
type SeqWrites struct {
	Generator string  `json:"generator"`
	Writes    uint64  `json:"writes"`
	PerSecond float64 `json:"per_second"`
	Keys      uint64  `json:"keys"`
}

// keyDraw draws key indices in [0, keys) for one caller: deterministic for
// a (dist, keys, seed, caller), so two runs call the same keys in the same
// order per caller.
type keyDraw struct {
	r    *rand.Rand
	z    *rand.Zipf
	keys int64
}

func newKeyDraw(dist string, keys int, seed uint64, caller int) *keyDraw {
	r := rand.New(rand.NewSource(int64(mix64(seed ^ mix64(uint64(caller)+1)))))
	d := &keyDraw{r: r, keys: int64(keys)}
	if dist == distZipf && keys > 1 {
		d.z = rand.NewZipf(r, zipfS, zipfV, uint64(keys-1))
	}
	return d
}

func (d *keyDraw) next() uint32 {
	if d.z != nil {
		return uint32(d.z.Uint64())
	}
	return uint32(d.r.Int63n(d.keys))
}

// mix64 is splitmix64's finalizer.
func mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// appendKey appends key i's bytes: "k" and i in decimal.
func appendKey(b []byte, i uint32) []byte {
	return strconv.AppendUint(append(b, 'k'), uint64(i), 10)
}

// maxKeyLen is the longest key appendKey makes.
const maxKeyLen = 11

// seqOwner is one owner the run calls: its address and connections.
type seqOwner struct {
	addr  string
	conns []*grpc.ClientConn
	stubs []firnv1.IDServiceClient
}

// seqRouter sends each key to its section's owner: the section map read
// from Info at the start, corrected by WRONG_NODE refusals (follow).
type seqRouter struct {
	def        seq.Definition
	targetHost string
	// dial opens an owner's connections (cfg.conns of them, ready).
	dial func(ctx context.Context, addr string) ([]*grpc.ClientConn, error)

	section []atomic.Int32              // section → owner index
	owners  atomic.Pointer[[]*seqOwner] // copy on write
	mu      sync.Mutex                  // serializes adding owners
}

// newSeqRouter builds the router of a generator from its Info: its
// sections, and each section's owner (a section without one goes to the
// target, which refuses it until one takes it).
func newSeqRouter(ctx context.Context, g *firnv1.GeneratorInfo, target string,
	dial func(ctx context.Context, addr string) ([]*grpc.ClientConn, error)) (*seqRouter, error) {
	if g.GetKind() != kindSeq {
		return nil, fmt.Errorf("%s: generator %q is of kind %q: --mode seq and seqs call a sequence generator (--generator NAME=seq on the node)",
			target, g.GetName(), g.GetKind())
	}
	n := int(g.GetSections())
	if n < 1 {
		return nil, fmt.Errorf("%s: generator %q reports no sections in Info", target, g.GetName())
	}
	host, _, err := net.SplitHostPort(target)
	if err != nil {
		return nil, err
	}
	r := &seqRouter{def: seq.Definition{Sections: n}, targetHost: host, dial: dial, section: make([]atomic.Int32, n)}
	r.owners.Store(&[]*seqOwner{})
	t, err := r.owner(ctx, target)
	if err != nil {
		return nil, err
	}
	for s := range r.section {
		r.section[s].Store(int32(t))
	}
	for _, o := range g.GetSectionOwners() {
		s := int(o.GetSection())
		if s >= n || o.GetAddress() == "" {
			continue
		}
		i, err := r.owner(ctx, o.GetAddress())
		if err != nil {
			return nil, fmt.Errorf("section %d's owner %s (Info of %s): %w", s, o.GetAddress(), target, err)
		}
		r.section[s].Store(int32(i))
	}
	return r, nil
}

// dialAddr is how an owner's advertised address is dialled: a node that
// listens on all interfaces (0.0.0.0:7300, [::]:7300, :7300) advertises
// that, so an unspecified host is replaced by the target's.
func (r *seqRouter) dialAddr(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return addr
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		return net.JoinHostPort(r.targetHost, port)
	}
	return addr
}

// owner is the index of the owner at addr, dialled on first use.
func (r *seqRouter) owner(ctx context.Context, addr string) (int, error) {
	addr = r.dialAddr(addr)
	if i := r.find(addr); i >= 0 {
		return i, nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if i := r.find(addr); i >= 0 {
		return i, nil
	}
	cur := *r.owners.Load()
	if len(cur) >= 1<<16 {
		return 0, fmt.Errorf("more than %d owners", 1<<16)
	}
	conns, err := r.dial(ctx, addr)
	if err != nil {
		for _, c := range conns {
			c.Close()
		}
		return 0, err
	}
	o := &seqOwner{addr: addr, conns: conns}
	for _, c := range conns {
		o.stubs = append(o.stubs, firnv1.NewIDServiceClient(c))
	}
	next := append(slices.Clip(cur), o)
	r.owners.Store(&next)
	return len(next) - 1, nil
}

func (r *seqRouter) find(addr string) int {
	for i, o := range *r.owners.Load() {
		if o.addr == addr {
			return i
		}
	}
	return -1
}

// route is the owner index of section s.
func (r *seqRouter) route(s int) int { return int(r.section[s].Load()) }

// stub is caller's connection to owner i.
func (r *seqRouter) stub(i, caller int) firnv1.IDServiceClient {
	o := (*r.owners.Load())[i]
	return o.stubs[caller%len(o.stubs)]
}

// follow moves section s to the owner at addr (a WRONG_NODE refusal named
// it) and returns its index.
func (r *seqRouter) follow(ctx context.Context, s int, addr string) (int, error) {
	i, err := r.owner(ctx, addr)
	if err != nil {
		return 0, err
	}
	r.section[s].Store(int32(i))
	return i, nil
}

// addrs is the owners' addresses, by index.
func (r *seqRouter) addrs() []string {
	var out []string
	for _, o := range *r.owners.Load() {
		out = append(out, o.addr)
	}
	return out
}

func (r *seqRouter) close() {
	for _, o := range *r.owners.Load() {
		for _, c := range o.conns {
			c.Close()
		}
	}
}

// refusal is the ErrorInfo reason of a refused call and its owner
// metadata (WRONG_NODE).
func refusal(err error) (reason, owner string) {
	st, ok := status.FromError(err)
	if !ok {
		return "", ""
	}
	for _, d := range st.Details() {
		if ei, ok := d.(*errdetails.ErrorInfo); ok {
			return ei.GetReason(), ei.GetMetadata()["owner"]
		}
	}
	return "", ""
}

// seqCaller is one caller's state in a sequence mode: its key draw and,
// for seqs, its preallocated batch.
type seqCaller struct {
	id     int
	draw   *keyDraw
	key    []byte
	keyBuf []byte
	slab   []firnv1.SeqItem
	keys   []uint32 // the key index of each slab item
	secs   []int    // its section
	ptrs   []*firnv1.SeqItem
	groups [][]int // per owner index: slab indices
	pend   []int
	retry  []int
}

func newSeqCaller(cfg runConfig, id int) *seqCaller {
	c := &seqCaller{id: id, draw: newKeyDraw(cfg.keyDist, cfg.keys, cfg.seed, id), key: make([]byte, 0, maxKeyLen)}
	if cfg.mode == modeSeqs {
		n := cfg.batch
		c.keyBuf = make([]byte, 0, n*maxKeyLen)
		c.slab = make([]firnv1.SeqItem, n)
		c.keys, c.secs = make([]uint32, n), make([]int, n)
		c.ptrs = make([]*firnv1.SeqItem, 0, n)
		c.pend, c.retry = make([]int, 0, n), make([]int, 0, n)
	}
	return c
}

// groupByOwner puts each pending item (an index into secs) in the group
// of its section's owner, in order: groups is reused (emptied first) and
// grown to the owners seen.
func groupByOwner(pending, secs []int, route func(section int) int, groups [][]int) [][]int {
	for i := range groups {
		groups[i] = groups[i][:0]
	}
	for _, it := range pending {
		o := route(secs[it])
		for len(groups) <= o {
			groups = append(groups, nil)
		}
		groups[o] = append(groups[o], it)
	}
	return groups
}

// record keeps one response for the checker, while the caller's part of
// the preallocated record has room.
func (w *worker) record(key uint32, first, count uint64, start, end time.Duration, who int) {
	if len(w.seqRec) < cap(w.seqRec) {
		w.seqRec = append(w.seqRec, seqRecord{first: first, start: int64(start), end: int64(end), key: key, count: uint16(count), who: uint16(who)})
	}
}

// seqOne is a NextSeq caller: a key per call, sent to its section's owner,
// following WRONG_NODE refusals.
func (w *worker) seqOne(ctx context.Context, cfg runConfig, r *seqRouter, c *seqCaller, phase *atomic.Int32, now mono) {
	req := &firnv1.NextSeqRequest{Generator: cfg.generator, Count: uint32(cfg.batch)}
	for ctx.Err() == nil {
		if phase.Load() == phaseStop {
			return
		}
		k := c.draw.next()
		c.key = appendKey(c.key[:0], k)
		req.Key = c.key
		sec := r.def.Section(seq.Hash(c.key))
		cctx, cancel := context.WithTimeout(ctx, cfg.timeout)
		t0 := now()
		var (
			resp   *firnv1.NextSeqResponse
			err    error
			who    int
			ta, tb time.Duration
			hops   uint64
		)
		for {
			who = r.route(sec)
			ta = now()
			resp, err = r.stub(who, c.id).NextSeq(cctx, req)
			tb = now()
			if err == nil || hops >= maxSeqHops {
				break
			}
			reason, owner := refusal(err)
			if reason != reasonWrongNode || owner == "" {
				break
			}
			hops++
			if _, ferr := r.follow(cctx, sec, owner); ferr != nil {
				err = fmt.Errorf("follow WRONG_NODE to %s: %w", owner, ferr)
				break
			}
		}
		cancel()
		measuring := phase.Load() == phaseMeasure
		if measuring {
			w.wrongNode += hops
		}
		if err != nil {
			if ctx.Err() == nil {
				if reason, _ := refusal(err); reason == reasonMoving && measuring {
					w.moving++
				}
				w.fail(err, tb-t0, measuring)
			}
			continue
		}
		if !measuring {
			continue
		}
		n := uint64(resp.GetCount())
		if n != uint64(cfg.batch) {
			w.malformed++
			continue
		}
		w.hist.record(int64(tb - t0))
		w.calls.Add(1)
		w.ids.Add(n)
		w.grants++
		w.record(k, resp.GetFirst(), n, ta, tb, who)
	}
}

// seqMany is a NextSeqs caller: --batch keys per call, split by owner
// into one RPC each; items refused WRONG_NODE go again to the owner named,
// in a further round.
func (w *worker) seqMany(ctx context.Context, cfg runConfig, r *seqRouter, c *seqCaller, phase *atomic.Int32, now mono) {
	req := &firnv1.NextSeqsRequest{Generator: cfg.generator}
	for ctx.Err() == nil {
		if phase.Load() == phaseStop {
			return
		}
		c.keyBuf = c.keyBuf[:0]
		c.pend = c.pend[:0]
		for i := range c.slab {
			k := c.draw.next()
			off := len(c.keyBuf)
			c.keyBuf = appendKey(c.keyBuf, k)
			key := c.keyBuf[off:len(c.keyBuf):len(c.keyBuf)]
			c.slab[i].Key, c.slab[i].Count = key, 1
			c.keys[i], c.secs[i] = k, r.def.Section(seq.Hash(key))
			c.pend = append(c.pend, i)
		}
		for round := 0; len(c.pend) > 0 && ctx.Err() == nil; round++ {
			c.groups = groupByOwner(c.pend, c.secs, r.route, c.groups)
			c.retry = c.retry[:0]
			for who, group := range c.groups {
				if len(group) == 0 {
					continue
				}
				c.ptrs = c.ptrs[:0]
				for _, it := range group {
					c.ptrs = append(c.ptrs, &c.slab[it])
				}
				req.Items = c.ptrs
				cctx, cancel := context.WithTimeout(ctx, cfg.timeout)
				ta := now()
				resp, err := r.stub(who, c.id).NextSeqs(cctx, req)
				tb := now()
				cancel()
				measuring := phase.Load() == phaseMeasure
				if err != nil {
					if ctx.Err() == nil {
						w.fail(err, tb-ta, measuring)
					}
					continue
				}
				res := resp.GetResults()
				if len(res) != len(group) {
					if measuring {
						w.malformed++
					}
					continue
				}
				var served uint64
				for j, it := range group {
					rs := res[j]
					switch {
					case rs.GetReason() == "" && rs.GetError() == "":
						if rs.GetCount() != 1 {
							if measuring {
								w.malformed++
							}
							continue
						}
						served++
						if measuring {
							w.record(c.keys[it], rs.GetFirst(), 1, ta, tb, who)
						}
					case rs.GetReason() == reasonWrongNode && rs.GetOwner() != "" && round < maxSeqHops:
						if measuring {
							w.wrongNode++
						}
						if _, ferr := r.follow(ctx, c.secs[it], rs.GetOwner()); ferr == nil {
							c.retry = append(c.retry, it)
						} else if measuring {
							w.itemErr("follow failed")
						}
					default:
						if measuring {
							if rs.GetReason() == reasonMoving {
								w.moving++
							}
							w.itemErr(rs.GetReason())
						}
					}
				}
				if !measuring {
					continue
				}
				w.hist.record(int64(tb - ta))
				w.calls.Add(1)
				w.ids.Add(served)
				w.grants += served
				w.items += uint64(len(group))
			}
			c.pend, c.retry = c.retry, c.pend
		}
	}
}

// itemErr counts a NextSeqs item refused with reason ("" : an error
// without one).
func (w *worker) itemErr(reason string) {
	if reason == "" {
		reason = "UNSPECIFIED"
	}
	if w.itemErrs == nil {
		w.itemErrs = map[string]uint64{}
	}
	w.itemErrs[reason]++
}

// seqDial returns the function that opens an owner's connections for a
// run: cfg.conns of them, each ready.
func seqDial(cfg runConfig) func(ctx context.Context, addr string) ([]*grpc.ClientConn, error) {
	return func(ctx context.Context, addr string) ([]*grpc.ClientConn, error) {
		c := cfg
		c.addr, c.mode = addr, modeSeq
		conns, _, err := dial(ctx, c)
		return conns, err
	}
}

// runSeq is run for the sequence modes: the section map from the
// target's Info, callers routed by it, and after the window the checker
// over every recorded response.
func runSeq(ctx context.Context, cfg runConfig) (*Result, error) {
	now := newMono()
	g, err := generatorInfo(ctx, cfg.addr, cfg.tls, cfg.generator)
	if err != nil {
		return nil, err
	}
	r, err := newSeqRouter(ctx, g, cfg.addr, seqDial(cfg))
	if r != nil {
		defer r.close()
	}
	if err != nil {
		return nil, err
	}
	workers := make([]*worker, cfg.callers)
	per := len(cfg.seqRecord) / cfg.callers
	callers := make([]*seqCaller, cfg.callers)
	for i := range workers {
		workers[i] = &worker{codes: map[codes.Code]uint64{}, seqRec: cfg.seqRecord[i*per : i*per : (i+1)*per], ignoreRetry: cfg.ignoreRetry, ignorePause: cfg.ignorePause}
		callers[i] = newSeqCaller(cfg, i)
	}
	var phase atomic.Int32
	var wg sync.WaitGroup
	for i, w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if cfg.mode == modeSeqs {
				w.seqMany(ctx, cfg, r, callers[i], &phase, now)
			} else {
				w.seqOne(ctx, cfg, r, callers[i], &phase, now)
			}
		}()
	}
	cw := cpuWindow{pid: cfg.serverPID}
	var m0, m1 seqMetrics
	var mErr error
	elapsed := measure(ctx, cfg, workers, &phase, now, func() {
		cw.start()
		if cfg.metricsURL != "" {
			m0, mErr = readSeqMetrics(ctx, cfg.metricsURL, g.GetName())
		}
	}, func() {
		cw.end()
		if cfg.metricsURL != "" && mErr == nil {
			m1, mErr = readSeqMetrics(ctx, cfg.metricsURL, g.GetName())
		}
	})
	wg.Wait()
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	if mErr != nil {
		return nil, mErr
	}
	res, _ := summarize(cfg, workers, elapsed)
	res.Kind = g.GetKind()
	res.Batch = cfg.batch
	cw.set(res)
	sr := &SeqResult{Generator: g.GetName(), Keys: cfg.keys, KeyDist: cfg.keyDist, Sections: r.def.Sections, Owners: r.addrs()}
	var items uint64
	for _, w := range workers {
		sr.WrongNode += w.wrongNode
		sr.SectionMoving += w.moving
		sr.Responses += w.grants
		res.Malformed += w.malformed
		items += w.items
		for k, n := range w.itemErrs {
			if sr.ItemErrors == nil {
				sr.ItemErrors = map[string]uint64{}
			}
			sr.ItemErrors[k] += n
		}
	}
	if cfg.mode == modeSeq {
		// A followed refusal is an RPC of its own.
		res.RPCs = res.Calls + sr.WrongNode
		res.RPCPS = float64(res.RPCs) / res.Seconds
	} else {
		sr.ItemsPerRPC = ratio(float64(items), float64(res.Calls))
	}
	if cfg.metricsURL != "" {
		sr.NodeWrites = m1.since(m0, g.GetName(), res.Seconds)
	}
	checkSeq(sr, cfg.seqRecord, workers)
	res.Checked = sr.Checked
	res.Seq = sr
	return res, nil
}

// checkSeq runs seqcheck.Check over the window's recorded responses, one
// key at a time: the callers' records are compacted into the front of
// record (they are parts of it), sorted by key, and each key's calls are
// built into one reused slice, so the check needs beyond the preallocated
// record only the calls of its busiest key (about 200 bytes each: the
// Call, and Check's copies).
func checkSeq(sr *SeqResult, record []seqRecord, workers []*worker) {
	recs := record[:0]
	for _, w := range workers {
		recs = append(recs, w.seqRec...)
	}
	sr.Checked = uint64(len(recs))
	slices.SortFunc(recs, func(a, b seqRecord) int {
		switch {
		case a.key < b.key:
			return -1
		case a.key > b.key:
			return 1
		}
		return 0
	})
	var calls []seqcheck.Call
	for i := 0; i < len(recs); {
		j := i
		for j < len(recs) && recs[j].key == recs[i].key {
			j++
		}
		key := string(appendKey(nil, recs[i].key))
		calls = calls[:0]
		for _, rc := range recs[i:j] {
			who := ""
			if int(rc.who) < len(sr.Owners) {
				who = sr.Owners[rc.who]
			}
			calls = append(calls, seqcheck.Call{Key: key, First: rc.first, Count: uint64(rc.count),
				Start: time.Duration(rc.start), End: time.Duration(rc.end), Who: who})
		}
		sr.CheckedKeys++
		if left := maxViolations - int(sr.Violations); left > 0 {
			for _, v := range seqcheck.Check(calls, left) {
				sr.Violations++
				if len(sr.Samples) < violationSamples {
					sr.Samples = append(sr.Samples, v.String())
				}
			}
		}
		i = j
	}
}

// seqViolations counts the sequence violations of every run in r.
func (r *Report) seqViolations() (n uint64, samples []string) {
	add := func(res *Result) {
		if res == nil || res.Seq == nil {
			return
		}
		n += res.Seq.Violations
		for _, s := range res.Seq.Samples {
			if len(samples) < violationSamples {
				samples = append(samples, res.Label+": "+s)
			}
		}
	}
	add(r.Run)
	if r.Compare != nil {
		for _, p := range r.Compare.Pairs {
			add(p.Node)
			add(p.Noop)
		}
	}
	return n, samples
}
