package admission

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"
)

// FairShare is a generator's admission and the order in which the callers
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
type FairShare struct {
	// quantum is the longest turn and maxQueue the queue bound, in IDs;
	// both follow the workers serving (setSize).
	quantum  atomic.Int64
	maxQueue atomic.Int64

	queued atomic.Int64 // IDs admitted and not yet produced; read by metrics
	shed   [NumShed]atomic.Uint64

	mu    sync.Mutex
	busy  bool // a turn is out
	flows map[string]*Flow
	// fresh holds the flows that were idle when they asked, old the rest;
	// a flow is in at most one of them.
	fresh, old flowQueue
	wake       chan struct{} // closed by interrupt
	// spare are flows dropped, for Admit to use again: a flow lives from
	// a request's admission to its last Leave, and the ring's misses
	// under load would otherwise allocate one per call.
	spare []*Flow
}

type Flow struct {
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
	ShedQueueFull  = iota // the queue bound
	ShedDeadline          // the caller's deadline falls before its turn
	ShedClientRate        // the caller's --client-rate
	NumShed
)

var ShedReasons = [NumShed]string{ShedQueueFull: "queue_full", ShedDeadline: "deadline", ShedClientRate: "client_rate"}

// ErrInterrupted ends a wait for a turn when the generator leaves serving.
var ErrInterrupted = errors.New("wait for a turn interrupted")

// ErrTurnLate ends a wait for a turn that has not come TurnMargin before
// the caller's deadline: the caller is refused with the cause while it
// still listens, not left to end at its deadline without one.
var ErrTurnLate = errors.New("the turn did not come within the caller's deadline")

// TurnMargin is the caller's time a wait for a turn that ends late leaves
// it (the same margin the paced refusals keep).
const TurnMargin = 20 * time.Millisecond

// quantumTime is the longest turn, in the layout's output: a single ID
// waits about this long per Flow served before it.
const quantumTime = 250 * time.Microsecond

func NewFairShare(rate float64, seqPerUnit uint64, maxQueue int64) *FairShare {
	fs := &FairShare{flows: map[string]*Flow{}, wake: make(chan struct{})}
	fs.SetSize(rate, seqPerUnit, maxQueue)
	return fs
}

// SetSize sizes the turns and the queue for a generator producing rate
// IDs/s in units of seqPerUnit IDs: a turn is quantumTime of that output
// (at most one unit), the queue bound maxQueue. Requests already admitted
// keep their place.
func (fs *FairShare) SetSize(rate float64, seqPerUnit uint64, maxQueue int64) {
	fs.quantum.Store(max(min(int64(rate*quantumTime.Seconds()), int64(seqPerUnit)), 1))
	fs.maxQueue.Store(maxQueue)
}

// Queued is the IDs admitted and not yet produced.
func (fs *FairShare) Queued() int64 { return max(fs.queued.Load(), 0) }

// MaxQueue is the queue bound, in IDs.
func (fs *FairShare) MaxQueue() int64 { return fs.maxQueue.Load() }

// Shed counts the requests shed for reason (ShedQueueFull, …).
func (fs *FairShare) Shed(reason int) uint64 { return fs.shed[reason].Load() }

// NoteShed counts a request shed for reason outside Admit (ShedClientRate).
func (fs *FairShare) NoteShed(reason int) { fs.shed[reason].Add(1) }

// Turn is the longest turn, in IDs.
func (fs *FairShare) Turn() int { return int(fs.quantum.Load()) }

// Admit enters n IDs of the flow key in the queue, or refuses at once
// with an *OverloadedError (generator and RetryAfter left to the caller).
// A flow with nothing queued asking for at most one turn is always
// admitted: it waits one round at most, and such requests are bounded by
// the number of flows. A request larger than the queue bound (up to the
// largest the generator advertises) is admitted when nothing is queued
// ahead of it: it still takes its turns, and what comes after it waits
// for them or is refused. leave takes the IDs out again.
func (fs *FairShare) Admit(ctx context.Context, key string, n int, rate float64) (*Flow, error) {
	fs.mu.Lock()
	f := fs.flows[key]
	if f == nil {
		if k := len(fs.spare); k > 0 {
			f, fs.spare = fs.spare[k-1], fs.spare[:k-1]
			f.key = key
		} else {
			f = &Flow{key: key}
		}
		fs.flows[key] = f
	}
	ahead := fs.queued.Load()
	limit := fs.maxQueue.Load()
	reason := -1
	if n > fs.Turn() || f.queued > 0 {
		switch {
		case ahead+int64(n) > limit && ahead > 0:
			reason = ShedQueueFull
		case ahead > 0:
			if dl, ok := ctx.Deadline(); ok && time.Until(dl) < idsTime(ahead, rate) {
				reason = ShedDeadline
			}
		}
	}
	if reason >= 0 {
		fs.drop(f)
		fs.mu.Unlock()
		fs.shed[reason].Add(1)
		return nil, &OverloadedError{Queued: ahead, Limit: limit, Asked: n, Deadline: reason == ShedDeadline,
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

// Leave takes n admitted IDs of f out of the queue.
func (fs *FairShare) Leave(f *Flow, n int) {
	fs.mu.Lock()
	f.queued -= int64(n)
	fs.queued.Add(-int64(n))
	fs.drop(f)
	fs.mu.Unlock()
}

// drop forgets an idle flow, so the map holds only flows with IDs queued.
// No one holds a dropped flow (none of its IDs is admitted, none waits,
// no queue lists it): it is kept for Admit, up to maxSpare.
func (fs *FairShare) drop(f *Flow) {
	if f.queued == 0 && !f.listed && len(f.waiters) == 0 {
		delete(fs.flows, f.key)
		if len(fs.spare) < maxSpare {
			f.key = ""
			fs.spare = append(fs.spare, f)
		}
	}
}

// maxSpare bounds the flows kept for reuse.
const maxSpare = 64

// Acquire waits for f's turn and returns its size (at most want). The
// caller generates that many IDs and calls release. It ends early with
// ctx's error, ErrTurnLate TurnMargin before ctx's deadline, or
// ErrInterrupted when interrupt is called. A turn free at once costs no
// timer.
func (fs *FairShare) Acquire(ctx context.Context, f *Flow, want int) (int, error) {
	fs.mu.Lock()
	if !fs.busy { // no turn out, so no Flow waits
		fs.busy = true
		g := min(want, fs.Turn())
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

	var late <-chan time.Time
	if dl, ok := ctx.Deadline(); ok {
		t := time.NewTimer(time.Until(dl) - TurnMargin)
		defer t.Stop()
		late = t.C
	}
	var err error
	select {
	case g := <-w.grant:
		return g, nil
	case <-ctx.Done():
		err = ctx.Err()
	case <-late:
		err = ErrTurnLate
	case <-wake:
		err = ErrInterrupted
	}
	fs.mu.Lock()
	if !f.remove(w) { // granted meanwhile: pass the turn on
		<-w.grant
		fs.next()
	}
	fs.mu.Unlock()
	return 0, err
}

// Release ends the turn and hands the next one out.
func (fs *FairShare) Release() {
	fs.mu.Lock()
	fs.next()
	fs.mu.Unlock()
}

// Interrupt ends every wait for a turn (ErrInterrupted): the generator left
// serving, and the waiters are refused with its cause.
func (fs *FairShare) Interrupt() {
	fs.mu.Lock()
	close(fs.wake)
	fs.wake = make(chan struct{})
	fs.mu.Unlock()
}

// next gives the turn to the first waiter of the next flow, new flows
// first; with none waiting, no turn is out. Called with mu held.
func (fs *FairShare) next() {
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
		g := min(w.want, fs.Turn())
		fs.requeue(f, w.want > g)
		w.grant <- g
		return
	}
}

// requeue puts a flow that was just given a turn at the end of the old
// flows when it will want another: its waiter asked for more than the
// turn, or others of its callers wait. Called with mu held.
func (fs *FairShare) requeue(f *Flow, more bool) {
	if !f.listed && (more || len(f.waiters) > 0) {
		f.listed = true
		fs.old.push(f)
	}
}

// remove takes w out of f's waiters; false if it is not there (granted).
func (f *Flow) remove(w *turnWaiter) bool {
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
	items []*Flow
	head  int
}

func (q *flowQueue) push(f *Flow) { q.items = append(q.items, f) }

func (q *flowQueue) pop() *Flow {
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
