package admission

import (
	"sync"
	"time"
)

// Refusals paces the refusals each flow (FlowKey: the client's certificate
// name, or its connection) is answered at once: up to RefusalBurst at
// once, then RefusalRate a second; a refusal beyond them is held back
// until its turn (never past the caller's deadline, and never more than
// MaxRefusalHold), then answered with its cause and RetryInfo as any
// other. A client that honours RetryInfo comes back once per refusal's
// retry time per caller, well inside the pace; one that ignores it — a
// loop retrying a refused batch after a fixed short pause, on many callers
// — is otherwise refused at full speed, and answering its retries takes
// the CPU the node's other callers need. Held, it retries no faster than
// the pace, and a held call costs a parked goroutine, not CPU.
type Refusals struct {
	mu    sync.Mutex
	flows map[string]*refusalDebt
	// sweepAt is when flows back within their burst are next dropped.
	sweepAt time.Duration
	held    uint64
}

// refusalDebt is a flow's bucket as debt: the time its next refusal may
// be answered at once, RefusalBurst/RefusalRate behind at most.
type refusalDebt struct{ next time.Duration }

const (
	// RefusalRate and RefusalBurst pace one flow's refusals: a client of
	// 100 callers each honouring a retry time of a second stays within.
	RefusalRate  = 100
	RefusalBurst = 100
	// MaxRefusalHold bounds one held refusal.
	MaxRefusalHold = time.Second
)

// holdMargin is the caller's time a held refusal leaves it.
const holdMargin = 20 * time.Millisecond

// refusalGap is the pace's spacing of refusals.
const refusalGap = time.Second / RefusalRate

// NewRefusals returns a pacer with no flow remembered.
func NewRefusals() *Refusals { return &Refusals{flows: map[string]*refusalDebt{}} }

// Refused notes a refusal of flow key at now (the monotonic clock) and
// returns how long to hold it back: 0 within the flow's pace, else until
// its turn, bounded by MaxRefusalHold and by the caller's time left (left,
// 0 for none) less holdMargin, so that the refusal reaches the caller
// before its deadline.
func (r *Refusals) Refused(key string, now, left time.Duration) time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	d := r.flows[key]
	if d == nil {
		r.sweep(now)
		d = &refusalDebt{next: now - RefusalBurst*refusalGap}
		r.flows[key] = d
	}
	d.next = max(d.next, now-RefusalBurst*refusalGap) + refusalGap
	hold := min(max(d.next-now, 0), MaxRefusalHold)
	if left > 0 {
		hold = max(min(hold, left-holdMargin), 0)
	}
	if hold > 0 {
		r.held++
	}
	return hold
}

// sweep drops, at most once a second, the flows whose bucket is full
// again. Called with mu held.
func (r *Refusals) sweep(now time.Duration) {
	if now < r.sweepAt {
		return
	}
	for k, d := range r.flows {
		if d.next <= now-RefusalBurst*refusalGap {
			delete(r.flows, k)
		}
	}
	r.sweepAt = now + time.Second
}

// Held is how many refusals were held back so far.
func (r *Refusals) Held() uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.held
}
