package admission

import (
	"testing"
	"time"
)

// TestRefusals: a flow's refusals are answered at once up to the burst,
// then at the pace, each held until its turn (bounded by the caller's
// time left and MaxRefusalHold); another flow is not held for it, and a
// flow refused within the pace — a client honouring RetryInfo — never is.
func TestRefusals(t *testing.T) {
	ms := time.Millisecond
	r := NewRefusals()
	for i := range RefusalBurst {
		if h := r.Refused("flood", 0, 0); h != 0 {
			t.Fatalf("refusal %d of the burst held %v", i, h)
		}
	}
	// Past the burst, at one instant: each one gap after the last.
	for i := 1; i <= 3; i++ {
		if h := r.Refused("flood", 0, 0); h != time.Duration(i)*refusalGap {
			t.Fatalf("refusal %d past the burst held %v, want %v", i, h, time.Duration(i)*refusalGap)
		}
	}
	// The caller's time left bounds the hold.
	if h := r.Refused("flood", 0, 35*ms); h != 15*ms {
		t.Fatalf("a refusal with 35 ms left held %v, want 15ms", h)
	}
	// Another flow answers at once.
	if h := r.Refused("other", 0, 0); h != 0 {
		t.Fatalf("another flow held %v", h)
	}
	// Within the pace: a refusal every 20 ms for 10 s, never held.
	for at := time.Duration(0); at < 10*time.Second; at += 20 * ms {
		if h := r.Refused("honest", at, 0); h != 0 {
			t.Fatalf("a refusal within the pace, at %v, held %v", at, h)
		}
	}
	// A hold is bounded by MaxRefusalHold however deep the debt.
	for range 1000 {
		r.Refused("deep", 0, 0)
	}
	if h := r.Refused("deep", 0, 0); h != MaxRefusalHold {
		t.Fatalf("a deep debt held %v, want %v", h, MaxRefusalHold)
	}
	if r.Held() == 0 {
		t.Fatal("Held counts none")
	}
}
