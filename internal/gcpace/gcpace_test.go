package gcpace

import (
	"context"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"testing"
	"time"
)

func TestPercent(t *testing.T) {
	for _, c := range []struct {
		live, growth uint64
		want         int
	}{
		{live: 4 << 20, growth: 32 << 20, want: 800},   // a node's heap: 8 × its size before the next
		{live: 3 << 20, growth: 32 << 20, want: 1067},  // rounded up: at least the growth
		{live: 32 << 20, growth: 32 << 20, want: 100},  // GOGC 100 already grows it by 32 MiB
		{live: 1 << 30, growth: 32 << 20, want: 100},   // a large heap: never below 100
		{live: 1 << 10, growth: 32 << 20, want: 10000}, // nearly empty: bounded
		{live: 0, growth: 32 << 20, want: 100},         // before the first collection: the runtime's
	} {
		if got := Percent(c.live, c.growth); got != c.want {
			t.Errorf("Percent(%d, %d) = %d, want %d", c.live, c.growth, got, c.want)
		}
	}
}

// The pacer sets GOGC from the heap read, again when the heap moved by
// more than a tenth, and not for a smaller move.
func TestPacerAdjust(t *testing.T) {
	live := uint64(4 << 20)
	var set []int
	p := &pacer{minGrowth: 32 << 20, read: func() uint64 { return live }, set: func(v int) int { set = append(set, v); return 100 }}
	p.adjust()
	live = 4<<20 + 200<<10 // 5 %: GOGC 762, within a tenth of 800
	p.adjust()
	live = 8 << 20 // GOGC 400
	p.adjust()
	live = 64 << 20 // GOGC 100
	p.adjust()
	p.adjust()
	want := []int{800, 400, 100}
	if len(set) != len(want) {
		t.Fatalf("GOGC set to %v, want %v", set, want)
	}
	for i := range want {
		if set[i] != want[i] {
			t.Fatalf("GOGC set to %v, want %v", set, want)
		}
	}
}

// Start leaves GOGC alone where the environment sets it.
func TestStartRespectsGOGC(t *testing.T) {
	t.Setenv("GOGC", "100")
	if Start(t.Context(), DefaultMinGrowth) {
		t.Fatal("Start ran with GOGC set in the environment")
	}
}

// Start sets GOGC after each collection from the heap it left live: high
// for this test's small heap, near 100 once 48 MiB more is live, at the
// next collection and not seconds later.
func TestStartFollowsEveryCollection(t *testing.T) {
	t.Setenv("GOGC", "")
	os.Unsetenv("GOGC")
	defer debug.SetGCPercent(100)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	if !Start(ctx, DefaultMinGrowth) {
		t.Fatal("Start did not run without GOGC in the environment")
	}
	gogc := func() int {
		s := []metrics.Sample{{Name: "/gc/gogc:percent"}}
		metrics.Read(s)
		return int(s[0].Value.Uint64())
	}
	await := func(ok func(int) bool, what string) {
		t.Helper()
		deadline := time.Now().Add(2 * time.Second)
		for !ok(gogc()) {
			if time.Now().After(deadline) {
				t.Fatalf("GOGC %d, want %s", gogc(), what)
			}
			runtime.GC()
			time.Sleep(10 * time.Millisecond)
		}
	}
	await(func(p int) bool { return p > 1000 }, "above 1000 for a heap of a few MB")
	live := make([]*[1 << 20]byte, 48)
	for i := range live {
		live[i] = new([1 << 20]byte)
	}
	await(func(p int) bool { return p < 200 }, "below 200 with 48 MiB more live")
	runtime.KeepAlive(live)
}
