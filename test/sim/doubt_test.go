package sim

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/firnid/firn/clockguard"
	"github.com/firnid/firn/coordinator"
	"github.com/firnid/firn/coordinator/memory"
	"github.com/firnid/firn/datadir"
	"github.com/firnid/firn/generator"
	"github.com/firnid/firn/server/core"
)

// TestServesOnceDoubtEnds: NTP says the clock is an hour off (the clock
// itself is right) for about a reservation window, so the node's
// reservation is held below the clock and runs short; then NTP agrees
// again. Once the generator says it serves, it must go on serving: the
// coordinator answers throughout (each reservation write takes 300 ms).
// Before, a write of the held value sent while NTP still doubted, and
// acknowledged just after it agreed, re-armed the expiry timer from the
// held reservation: the generator that had just turned serving refused
// "reservation runs out … and the coordinator has not confirmed a new
// one" until the next write landed (a fresh-clone chaos run: n1 ready,
// then refusing for 11 ms). The doubt ends at sixteen instants 100 ms
// apart, so that some fall while a held write is in flight.
func TestServesOnceDoubtEnds(t *testing.T) {
	for i := range 16 {
		clear := 4*time.Second + time.Duration(i)*100*time.Millisecond
		t.Run(fmt.Sprint(clear), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) { servesOnceDoubtEnds(t, clear) })
		})
	}
}

func servesOnceDoubtEnds(t *testing.T, doubtFor time.Duration) {
	quiet := slog.New(slog.DiscardHandler)
	store := memory.New(memory.Config{TTL: 5 * time.Second, Timeout: time.Second, Logger: quiet})
	clock := clockguard.NewOffset(newSimClock(era, nil), 0)
	layout, _ := generator.Preset("snowflake")
	cfg := core.DefaultConfig()
	cfg.Cluster = "doubt"
	cfg.Generators = []core.GeneratorConfig{{Name: generatorName, Layout: layout}}
	cfg.NTP = []string{"127.0.0.1:123"}
	cfg.NTPInterval = time.Minute
	wall, _ := clock.Now()
	if err := cfg.Finish(wall); err != nil {
		t.Fatal(err)
	}
	st, err := datadir.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	client := store.Connect(clock)
	defer client.Close()
	ntp := &verdicts{clock: clock}
	info := coordinator.NodeInfo{Name: "n1", InstanceID: st.InstanceID(), Address: "n1:7300", StartTime: wall}
	nc, err := core.New(cfg, client, st, clock, info, core.WithLogger(quiet),
		core.WithNTPRunner(func(report func(clockguard.NTPResult, error)) (core.NTPRunner, error) {
			ntp.ntp = &fakeNTP{verdict: ntp.check, report: report, trigger: make(chan struct{}, 1)}
			return ntp.ntp, nil
		}))
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var log []clockguard.Transition
	unwatch, err := nc.Watch(generatorName, func(tr clockguard.Transition) {
		mu.Lock()
		log = append(log, tr)
		mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	defer unwatch()
	if err := nc.Start(); err != nil {
		t.Fatal(err)
	}
	defer nc.Stop()
	serving := func() bool {
		sn, err := nc.StateSnapshot(generatorName)
		return err == nil && sn.State == clockguard.StateServing
	}
	for start := time.Now(); !serving(); time.Sleep(10 * time.Millisecond) {
		if time.Since(start) > 30*time.Second {
			sn, _ := nc.StateSnapshot(generatorName)
			t.Fatalf("not serving 30 s after the start: %s", sn.Reason)
		}
	}
	store.Faults().SetLatency(memory.OpReserve, 300*time.Millisecond)
	time.Sleep(3 * time.Second)

	ntp.set(time.Hour)
	time.Sleep(doubtFor)
	if serving() {
		t.Fatal("serving while NTP says the clock is an hour off")
	}
	mu.Lock()
	from := len(log)
	mu.Unlock()
	// A caller from the moment NTP agrees: once the generator serves,
	// none of its calls may fail.
	type outcome struct {
		at  time.Time
		err error
	}
	var calls []outcome
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		dst := make([]uint64, 10)
		for {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			err := nc.NextIDs(ctx, generatorName, dst)
			cancel()
			wall, _ := clock.Now()
			mu.Lock()
			calls = append(calls, outcome{wall, err})
			mu.Unlock()
		}
	}()
	ntp.set(0)
	time.Sleep(5 * time.Second)
	close(stop)
	<-done

	mu.Lock()
	after := append([]clockguard.Transition(nil), log[from:]...)
	mu.Unlock()
	var lines []string
	served := false
	for _, tr := range after {
		lines = append(lines, fmt.Sprintf("%s %v → %v (%s) %s", tr.At.Format("15:04:05.000"), tr.From, tr.To, tr.Source, tr.Reason))
		switch {
		case tr.To == clockguard.StateServing:
			served = true
		case served && tr.From == clockguard.StateServing:
			t.Errorf("the generator served, then went out with the coordinator answering:\n%s", strings.Join(lines, "\n"))
			return
		}
	}
	if !served {
		t.Errorf("not serving 5 s after NTP agreed again:\n%s", strings.Join(lines, "\n"))
		return
	}
	began := after[slices.IndexFunc(after, func(tr clockguard.Transition) bool { return tr.To == clockguard.StateServing })].At
	ok := 0
	for _, c := range calls {
		switch {
		case c.err == nil:
			ok++
		case c.at.After(began):
			t.Errorf("a call at %s, after the generator turned serving at %s, failed: %v\n%s",
				c.at.Format("15:04:05.000"), began.Format("15:04:05.000"), c.err, strings.Join(lines, "\n"))
			return
		}
	}
	if ok == 0 {
		t.Errorf("no call succeeded in the 5 s after NTP agreed again (%d calls)", len(calls))
	}
}

// verdicts is the NTP verdict the test sets: the clock is off by the
// offset set (fakeNTP reports it at once on Trigger, and once a minute).
type verdicts struct {
	clock clockguard.Clock
	off   atomic.Int64
	ntp   *fakeNTP
}

// set makes the verdict an offset of off, reported at once.
func (v *verdicts) set(off time.Duration) {
	v.off.Store(int64(off))
	v.ntp.Trigger()
}

func (v *verdicts) check() (clockguard.NTPResult, error) {
	wall, mono := v.clock.Now()
	limit := 250 * time.Millisecond
	res := clockguard.NTPResult{At: wall, StartMono: mono, Limit: limit, Need: 1, Valid: 1, Offset: time.Duration(v.off.Load())}
	if res.Offset > limit || res.Offset < -limit {
		return res, &clockguard.OffsetError{Offset: res.Offset, Limit: limit}
	}
	res.OK = true
	return res, nil
}
