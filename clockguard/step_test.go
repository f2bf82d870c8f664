package clockguard_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/firnid/firn/clockguard"
)

func TestStepSize(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	ms := time.Millisecond
	for _, tc := range []struct {
		name     string
		wallGone time.Duration // wall delta between the reads
		monoGone time.Duration // monotonic delta between the reads
		want     time.Duration
	}{
		{"no time passed", 0, 0, 0},
		{"both moved together", 20 * ms, 20 * ms, 0},
		{"wall back 500ms while 20ms passed", -480 * ms, 20 * ms, 500 * ms},
		{"wall back 1ms", 19 * ms, 20 * ms, ms},
		{"wall stood still (stepped back by the interval)", 0, 20 * ms, 20 * ms},
		{"wall forward 3s", 3020 * ms, 20 * ms, -3 * time.Second},
		{"wall back 10s", -10 * time.Second, 0, 10 * time.Second},
		{"slew: wall 1us slow", 20*ms - time.Microsecond, 20 * ms, time.Microsecond},
		{"suspend: wall moved, monotonic did not", time.Minute, 0, -time.Minute},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mono0 := 5 * time.Second
			got := clockguard.StepSize(t0, mono0, t0.Add(tc.wallGone), mono0+tc.monoGone)
			if got != tc.want {
				t.Fatalf("StepSize = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestStepDetectorFake drives Poll by hand on a fake clock.
func TestStepDetectorFake(t *testing.T) {
	clock := clockguard.NewFake(time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC))
	var seen []clockguard.Step
	d, err := clockguard.NewStepDetector(clock, clockguard.DefaultStepConfig(),
		clockguard.WithStepCallback(func(s clockguard.Step) { seen = append(seen, s) }))
	if err != nil {
		t.Fatal(err)
	}
	ms := time.Millisecond
	steps := []struct {
		name    string
		move    func()
		want    time.Duration // 0: none reported
		back, f uint64        // counters after the poll
	}{
		{"time passes", func() { clock.Advance(20 * ms) }, 0, 0, 0},
		{"jitter below threshold", func() { clock.Advance(20 * ms); clock.Step(-999 * time.Microsecond) }, 0, 0, 0},
		{"back 300ms", func() { clock.Advance(20 * ms); clock.Step(-300 * ms) }, 300 * ms, 1, 0},
		{"at threshold back 1ms", func() { clock.Step(-ms) }, ms, 2, 0},
		{"forward 2s", func() { clock.Advance(20 * ms); clock.Step(2 * time.Second) }, -2 * time.Second, 2, 1},
		{"back and forth inside one interval cancel out", func() { clock.Step(-time.Second); clock.Step(time.Second) }, 0, 2, 1},
		{"SetWall back 1h", func() { w, _ := clock.Now(); clock.SetWall(w.Add(-time.Hour)) }, time.Hour, 3, 1},
	}
	for _, st := range steps {
		st.move()
		s, ok := d.Poll()
		if ok != (st.want != 0) || s.Size != st.want {
			t.Fatalf("%s: Poll = %v, %v; want size %v", st.name, s, ok, st.want)
		}
		if d.Backward() != st.back || d.Forward() != st.f {
			t.Fatalf("%s: counters back=%d forward=%d, want %d, %d", st.name, d.Backward(), d.Forward(), st.back, st.f)
		}
		if ok && d.LastStep() != st.want {
			t.Fatalf("%s: LastStep = %v, want %v", st.name, d.LastStep(), st.want)
		}
	}
	if len(seen) != 4 {
		t.Fatalf("callback saw %d steps, want 4: %v", len(seen), seen)
	}
	if got := seen[0].String(); got != "clock stepped back 300ms" {
		t.Errorf("String = %q", got)
	}
	if got := seen[2].String(); got != "clock stepped forward 2s" {
		t.Errorf("String = %q", got)
	}
}

// TestStepDetectorRunning is the required scenario: a running detector over
// an Offset clock sees each change of offset as a step of its size, within
// ±5ms. SetOffset is absolute, so −500ms, −5s, +3s are steps of 500ms back,
// 4.5s back and 8s forward.
func TestStepDetectorRunning(t *testing.T) {
	clock := clockguard.NewOffset(clockguard.NewSystem(), 0)
	got := make(chan clockguard.Step, 16)
	cfg := clockguard.DefaultStepConfig()
	cfg.Interval = 10 * time.Millisecond
	d, err := clockguard.NewStepDetector(clock, cfg, clockguard.WithStepCallback(func(s clockguard.Step) { got <- s }))
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Start(); err != nil {
		t.Fatal(err)
	}
	defer d.Stop()

	const tol = 5 * time.Millisecond
	for i, tc := range []struct {
		offset time.Duration
		want   time.Duration // step size: > 0 back
	}{
		{-500 * time.Millisecond, 500 * time.Millisecond},
		{-5 * time.Second, 4500 * time.Millisecond},
		{3 * time.Second, -8 * time.Second},
	} {
		time.Sleep(30 * time.Millisecond) // a few quiet polls in between
		clock.SetOffset(tc.offset)
		select {
		case s := <-got:
			if s.Size < tc.want-tol || s.Size > tc.want+tol {
				t.Fatalf("offset %v: step %v, want %v ±%v", tc.offset, s.Size, tc.want, tol)
			}
			if s.Backward() != (tc.want > 0) {
				t.Fatalf("offset %v: Backward = %v", tc.offset, s.Backward())
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("step %d (offset %v) not reported within 5s", i, tc.offset)
		}
	}
	time.Sleep(50 * time.Millisecond)
	d.Stop()
	select {
	case s := <-got:
		t.Fatalf("spurious step reported: %v", s)
	default:
	}
	if d.Backward() != 2 || d.Forward() != 1 {
		t.Fatalf("counters back=%d forward=%d, want 2, 1", d.Backward(), d.Forward())
	}
	if d.LastStep() < -8*time.Second-tol || d.LastStep() > -8*time.Second+tol {
		t.Fatalf("LastStep = %v, want -8s", d.LastStep())
	}
}

func TestStepDetectorLifecycle(t *testing.T) {
	d, err := clockguard.NewStepDetector(clockguard.NewSystem(), clockguard.DefaultStepConfig())
	if err != nil {
		t.Fatal(err)
	}
	d.Stop() // before Start: no-op
	if err := d.Start(); err != nil {
		t.Fatal(err)
	}
	if err := d.Start(); !errors.Is(err, clockguard.ErrRunning) {
		t.Fatalf("second Start = %v, want ErrRunning", err)
	}
	d.Stop()
	d.Stop()
	if err := d.Start(); err != nil { // restartable
		t.Fatal(err)
	}
	d.Stop()
}

func TestStepConfigValidate(t *testing.T) {
	if err := clockguard.DefaultStepConfig().Validate(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		cfg  clockguard.StepConfig
		want string
	}{
		{"interval zero", clockguard.StepConfig{Threshold: time.Millisecond}, "StepConfig.Interval 0s: must be 1ms..1s"},
		{"interval too long", clockguard.StepConfig{Interval: 2 * time.Second, Threshold: time.Millisecond}, "StepConfig.Interval"},
		{"threshold zero", clockguard.StepConfig{Interval: 10 * time.Millisecond}, "StepConfig.Threshold"},
		{"threshold negative", clockguard.StepConfig{Interval: 10 * time.Millisecond, Threshold: -1}, "StepConfig.Threshold"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.cfg.Validate()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Validate = %v, want %q", err, tc.want)
			}
			if _, err := clockguard.NewStepDetector(clockguard.NewSystem(), tc.cfg); err == nil {
				t.Fatal("NewStepDetector accepted the bad config")
			}
		})
	}
}
