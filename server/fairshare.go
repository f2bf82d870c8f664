package server

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"
)

// fairShare is a generator's admission and the order in which the callers
// the ring could not serve get its output (docs/design.md, Overload).
//
// Each caller belongs to a flow: its client identity under mTLS, else its
// connection (flowKey). Admission bounds the IDs asked for and not yet
// produced (--max-queue) and refuses at once what would pass the bound or
// could not be served before the caller's deadline. The admitted take
// turns to generate: a turn is at most quantum IDs, and the turns go round
// the flows that wait (deficit round-robin by IDs, a request being
// divisible into turns). A flow that was idle is served before the busy
// ones, so a caller asking for a single ID waits for the turn in progress
// and the other newly arrived flows, never behind another caller's
// 100,000. One turn is out at a time; the ring's filler is the only other
// producer.
type fairShare struct {
	// quantum is the longest turn and maxQueue the queue bound, in IDs;
	// both follow the workers serving (setSize).
	quantum  atomic.Int64
	maxQueue atomic.Int64

	queued atomic.Int64 // IDs admitted and not yet produced; read by metrics
	shed   [numShed]atomic.Uint64

	mu    sync.Mutex
	busy  bool // a turn is out
	flows map[string]*flow
	// fresh holds the flows that were idle when they asked, old the rest;
	// a flow is in at most one of them.
	fresh, old flowQueue
	wake       chan struct{} // closed by interrupt
}

type flow struct {
	key     string
	queued  int64 // this flow's admitted IDs
	waiters []*turnWaiter
	listed  bool // in fresh or old
}

type turnWaiter struct {
	want  int
	grant chan int // buffered: the turn's size, sent under mu
}

// The reasons a request is shed (firn_requests_shed_total{reason}).
const (
	shedQueueFull  = iota // the queue bound
	shedDeadline          // the caller's deadline falls before its turn
	shedClientRate        // the caller's --client-rate
	numShed
)

var shedReasons = [numShed]string{shedQueueFull: "queue_full", shedDeadline: "deadline", shedClientRate: "client_rate"}

// errInterrupted ends a wait for a turn when the generator leaves serving.
var errInterrupted = errors.New("wait for a turn interrupted")

// quantumTime is the longest turn, in the layout's output: a single ID
// waits about this long per flow served before it.
const quantumTime = 250 * time.Microsecond

func newFairShare(rate float64, seqPerUnit uint64, maxQueue int64) *fairShare {
	fs := &fairShare{flows: map[string]*flow{}, wake: make(chan struct{})}
	fs.setSize(rate, seqPerUnit, maxQueue)
	return fs
}

// setSize sizes the turns and the queue for a generator producing rate
// IDs/s in units of seqPerUnit IDs: a turn is quantumTime of that output
// (at most one unit), the queue bound maxQueue. Requests already admitted
// keep their place.
func (fs *fairShare) setSize(rate float64, seqPerUnit uint64, maxQueue int64) {
	fs.quantum.Store(max(min(int64(rate*quantumTime.Seconds()), int64(seqPerUnit)), 1))
	fs.maxQueue.Store(maxQueue)
}

// turn is the longest turn, in IDs.
func (fs *fairShare) turn() int { return int(fs.quantum.Load()) }

// admit enters n IDs of the flow key in the queue, or refuses at once
// with an *OverloadedError (generator and RetryAfter left to the caller).
// A flow with nothing queued asking for at most one turn is always
// admitted: it waits one round at most, and such requests are bounded by
// the number of flows. A request larger than the queue bound (up to the
// largest the generator advertises) is admitted when nothing is queued
// ahead of it: it still takes its turns, and what comes after it waits
// for them or is refused. leave takes the IDs out again.
func (fs *fairShare) admit(ctx context.Context, key string, n int, rate float64) (*flow, error) {
	fs.mu.Lock()
	f := fs.flows[key]
	if f == nil {
		f = &flow{key: key}
		fs.flows[key] = f
	}
	ahead := fs.queued.Load()
	limit := fs.maxQueue.Load()
	reason := -1
	if n > fs.turn() || f.queued > 0 {
		switch {
		case ahead+int64(n) > limit && ahead > 0:
			reason = shedQueueFull
		case ahead > 0:
			if dl, ok := ctx.Deadline(); ok && time.Until(dl) < idsTime(ahead, rate) {
				reason = shedDeadline
			}
		}
	}
	if reason >= 0 {
		fs.drop(f)
		fs.mu.Unlock()
		fs.shed[reason].Add(1)
		return nil, &OverloadedError{Queued: ahead, Limit: limit, Asked: n, Deadline: reason == shedDeadline,
			RetryAfter: max(idsTime(ahead, rate), time.Millisecond)}
	}
	f.queued += int64(n)
	fs.queued.Add(int64(n))
	fs.mu.Unlock()
	return f, nil
}

// idsTime is how long the layout takes to produce n IDs.
func idsTime(n int64, rate float64) time.Duration {
	return time.Duration(float64(n) / rate * float64(time.Second))
}

// leave takes n admitted IDs of f out of the queue.
func (fs *fairShare) leave(f *flow, n int) {
	fs.mu.Lock()
	f.queued -= int64(n)
	fs.queued.Add(-int64(n))
	fs.drop(f)
	fs.mu.Unlock()
}

// drop forgets an idle flow, so the map holds only flows with IDs queued.
func (fs *fairShare) drop(f *flow) {
	if f.queued == 0 && !f.listed && len(f.waiters) == 0 {
		delete(fs.flows, f.key)
	}
}

// acquire waits for f's turn and returns its size (at most want). The
// caller generates that many IDs and calls release. It ends early with
// ctx's error, or errInterrupted when interrupt is called.
func (fs *fairShare) acquire(ctx context.Context, f *flow, want int) (int, error) {
	fs.mu.Lock()
	if !fs.busy { // no turn out, so no flow waits
		fs.busy = true
		g := min(want, fs.turn())
		fs.requeue(f, want > g)
		fs.mu.Unlock()
		return g, nil
	}
	w := &turnWaiter{want: want, grant: make(chan int, 1)}
	f.waiters = append(f.waiters, w)
	if !f.listed {
		f.listed = true
		fs.fresh.push(f)
	}
	wake := fs.wake
	fs.mu.Unlock()

	var err error
	select {
	case g := <-w.grant:
		return g, nil
	case <-ctx.Done():
		err = ctx.Err()
	case <-wake:
		err = errInterrupted
	}
	fs.mu.Lock()
	if !f.remove(w) { // granted meanwhile: pass the turn on
		<-w.grant
		fs.next()
	}
	fs.mu.Unlock()
	return 0, err
}

// release ends the turn and hands the next one out.
func (fs *fairShare) release() {
	fs.mu.Lock()
	fs.next()
	fs.mu.Unlock()
}

// interrupt ends every wait for a turn (errInterrupted): the generator left
// serving, and the waiters are refused with its cause.
func (fs *fairShare) interrupt() {
	fs.mu.Lock()
	close(fs.wake)
	fs.wake = make(chan struct{})
	fs.mu.Unlock()
}

// next gives the turn to the first waiter of the next flow, new flows
// first; with none waiting, no turn is out. Called with mu held.
func (fs *fairShare) next() {
	for {
		f := fs.fresh.pop()
		if f == nil {
			f = fs.old.pop()
		}
		if f == nil {
			fs.busy = false
			return
		}
		f.listed = false
		if len(f.waiters) == 0 {
			fs.drop(f)
			continue
		}
		w := f.waiters[0]
		f.waiters[0] = nil
		f.waiters = f.waiters[1:]
		g := min(w.want, fs.turn())
		fs.requeue(f, w.want > g)
		w.grant <- g
		return
	}
}

// requeue puts a flow that was just given a turn at the end of the old
// flows when it will want another: its waiter asked for more than the
// turn, or others of its callers wait. Called with mu held.
func (fs *fairShare) requeue(f *flow, more bool) {
	if !f.listed && (more || len(f.waiters) > 0) {
		f.listed = true
		fs.old.push(f)
	}
}

// remove takes w out of f's waiters; false if it is not there (granted).
func (f *flow) remove(w *turnWaiter) bool {
	for i, x := range f.waiters {
		if x == w {
			f.waiters = append(f.waiters[:i], f.waiters[i+1:]...)
			return true
		}
	}
	return false
}

// flowQueue is a FIFO of flows.
type flowQueue struct {
	items []*flow
	head  int
}

func (q *flowQueue) push(f *flow) { q.items = append(q.items, f) }

func (q *flowQueue) pop() *flow {
	if q.head == len(q.items) {
		return nil
	}
	f := q.items[q.head]
	q.items[q.head] = nil
	q.head++
	if q.head == len(q.items) {
		q.items, q.head = q.items[:0], 0
	}
	return f
}
