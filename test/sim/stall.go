package sim

import (
	"fmt"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// A busy loop — a wait that never blocks — stops a synctest bubble's
// virtual time: time moves only while every goroutine in the bubble is
// blocked, and the looping one never is, so the run would hang without a
// word. The nodes' clocks (simClock) count their readings at each virtual
// instant: some thousands at most while the nodes work (6,000 the most
// seen over 27 seeds), millions a second when a loop polls the clock
// without waiting. Past spinReads at one instant,
// every further reading there moves the clocks on a little, as real time
// would move under the spinning loop, until its wait is over and virtual
// time moves again (at most nudgeMost per stall); the run then reports the
// loop as a violation, with the stack of the goroutine that read the clock
// when it was found. A stall that this does not end — a loop that does not
// read the clock, a goroutine blocked on a mutex for good — is caught by
// the watchdog outside the bubble (Stall.Watch, real time), which panics
// with every goroutine's stack.

const (
	spinReads  = 10_000_000 // readings at one virtual instant
	nudgeStep  = 100 * time.Microsecond
	nudgeMost  = 2 * time.Second  // per stall: more than max-lead and a unit
	stallPanic = 90 * time.Second // real time
)

// Stall connects a run's clocks (inside its bubble) with its watchdog
// (outside). Create it outside the bubble with NewStall, pass it in
// Options.Stall, and run Watch beside the run.
type Stall struct {
	virtual atomic.Int64 // the virtual instant of the latest reading (UnixNano)
	reads   atomic.Int64 // readings at that instant
	stuck   atomic.Bool  // that instant is a stall: readings move the clocks on
	nudged  atomic.Int64 // how far they moved the clocks on at it
	off     atomic.Int64 // how far the clocks moved on, in all: only grows

	mu    sync.Mutex
	first string    // the stack of the reading that found the first stall
	at    time.Time // the instant of the first stall
	count int       // stalls
}

// NewStall returns a Stall for one run.
func NewStall() *Stall { return &Stall{} }

// Watch watches the run until done is closed, and panics, with every
// goroutine's stack, when its virtual time stands still for stallPanic of
// real time. Run it on a goroutine outside the bubble; what names the run
// in the panic.
func (s *Stall) Watch(done <-chan struct{}, what string) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	last, since := s.virtual.Load(), time.Now()
	for {
		select {
		case <-done:
			return
		case <-t.C:
		}
		if v := s.virtual.Load(); v != last {
			last, since = v, time.Now()
			continue
		}
		if still := time.Since(since); still >= stallPanic {
			fmt.Fprintf(os.Stderr, "%s\n", stallStacks(1<<22))
			panic(fmt.Sprintf("%s: virtual time stood still for %v of real time, and moving the clocks on did not end it: a goroutine spins or is blocked for good (the stacks above)", what, still.Round(time.Second)))
		}
	}
}

// offset counts a clock reading at virtual instant t and returns how far
// the clocks stand moved on: further, by a step, at each reading once the
// instant is found a stall.
func (s *Stall) offset(t time.Time) time.Duration {
	if s == nil {
		return 0
	}
	v := t.UnixNano()
	if s.virtual.Load() != v {
		// Time moved (every goroutine of the bubble reads one instant).
		s.virtual.Store(v)
		s.reads.Store(0)
		s.stuck.Store(false)
		return time.Duration(s.off.Load())
	}
	if s.reads.Add(1) < spinReads {
		return time.Duration(s.off.Load())
	}
	if !s.stuck.Load() && s.stuck.CompareAndSwap(false, true) {
		s.nudged.Store(0)
		s.mu.Lock()
		if s.first == "" {
			s.first, s.at = runningStacks(), t
		}
		s.count++
		s.mu.Unlock()
	}
	if s.nudged.Load() < int64(nudgeMost) {
		s.nudged.Add(int64(nudgeStep))
		s.off.Add(int64(nudgeStep))
	}
	return time.Duration(s.off.Load())
}

// report is the violation for the stalls seen, "" if none.
func (s *Stall) report(start time.Time) string {
	if s == nil {
		return ""
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.first == "" {
		return ""
	}
	return fmt.Sprintf("%9v  busy loop: the clocks were read %d times at one virtual instant (a wait that never blocks stops virtual time); moved on %v in all to end it (%d stall(s)); the goroutines running when it was found:\n%s",
		s.at.Sub(start).Round(time.Millisecond), spinReads, time.Duration(s.off.Load()), s.count, indentStack(s.first))
}

// runningStacks are the stacks of the goroutines of the caller's bubble
// that were running or runnable: the loop among them.
func runningStacks() string {
	own := make([]byte, 1<<10)
	own = own[:runtime.Stack(own, false)]
	header, _, _ := strings.Cut(string(own), "\n")
	bubble := ""
	if i := strings.Index(header, "synctest bubble "); i >= 0 {
		bubble = header[i:]
	}
	buf := make([]byte, 1<<24)
	buf = buf[:runtime.Stack(buf, true)]
	var keep []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		h, _, _ := strings.Cut(g, "\n")
		if strings.HasSuffix(h, bubble) && (strings.Contains(h, "[running") || strings.Contains(h, "[runnable")) {
			keep = append(keep, strings.TrimSpace(g))
		}
	}
	return strings.Join(keep, "\n\n")
}

func indentStack(st string) string {
	lines := strings.Split(strings.TrimSpace(st), "\n")
	if len(lines) > 80 {
		lines = append(lines[:80], "…")
	}
	return "      " + strings.Join(lines, "\n      ")
}

// simClock is the run's true clock, the base of every node's: the
// bubble's virtual time (moved to the era the layouts accept), plus what
// a stall moved it on. Wall and monotonic readings move together, as
// real time does.
type simClock struct {
	era    time.Duration
	origin time.Time
	stall  *Stall
}

func newSimClock(era time.Duration, stall *Stall) *simClock {
	return &simClock{era: era, origin: time.Now(), stall: stall}
}

// Now implements clockguard.Clock.
func (c *simClock) Now() (time.Time, time.Duration) {
	t := time.Now()
	d := c.stall.offset(t)
	return t.Round(0).Add(c.era + d), t.Sub(c.origin) + d
}

// FastMono is the monotonic reading alone (clockguard.System's).
func (c *simClock) FastMono() (time.Duration, bool) {
	t := time.Now()
	return t.Sub(c.origin) + c.stall.offset(t), true
}

// stallStacks is every goroutine's stack for a stall's report, at most
// limit bytes of them, the suspects first: a stall is a goroutine in a
// bubble that is not durably blocked — running, runnable, or waiting on a
// mutex or on a channel from outside its bubble — while the others wait
// for virtual time to move. With thousands of seeds' goroutines in the
// process, a dump in the runtime's order would spend its room on those.
func stallStacks(limit int) string {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) || len(buf) >= 1<<28 {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	var suspects, rest strings.Builder
	for _, g := range strings.Split(string(buf), "\n\n") {
		head, _, _ := strings.Cut(g, "\n")
		if strings.Contains(head, "synctest bubble") && !strings.Contains(head, "durable") {
			suspects.WriteString(g + "\n\n")
		} else {
			rest.WriteString(g + "\n\n")
		}
	}
	out := "goroutines in a bubble not durably blocked (the suspects):\n\n" + suspects.String() + "the others:\n\n" + rest.String()
	if len(out) > limit {
		out = out[:limit] + "\n… (cut at " + fmt.Sprint(limit) + " bytes)"
	}
	return out
}
