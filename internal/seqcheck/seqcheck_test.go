package seqcheck

import (
	"testing"
	"time"
)

func ms(n int) time.Duration { return time.Duration(n) * time.Millisecond }

func TestCheck(t *testing.T) {
	good := []Call{
		{Key: "a", First: 1, Count: 2, Start: ms(0), End: ms(5)},
		{Key: "a", First: 3, Count: 1, Start: ms(6), End: ms(7)},
		// Overlapping in time: any order of values is fine.
		{Key: "a", First: 10, Count: 1, Start: ms(8), End: ms(20)},
		{Key: "a", First: 4, Count: 1, Start: ms(9), End: ms(12)},
		// Another key may repeat a's values.
		{Key: "b", First: 1, Count: 4, Start: ms(0), End: ms(1)},
	}
	if v := Check(good, 0); len(v) != 0 {
		t.Fatalf("violations in a good history: %v", v)
	}
	cases := map[string][]Call{
		"twice": {
			{Key: "a", First: 1, Count: 3, Start: ms(0), End: ms(1)},
			{Key: "a", First: 3, Count: 1, Start: ms(0), End: ms(1)},
		},
		"order": {
			{Key: "a", First: 5, Count: 1, Start: ms(0), End: ms(1)},
			{Key: "a", First: 4, Count: 1, Start: ms(2), End: ms(3)},
		},
		"order-equal-ends": {
			// Returned at 1, the other began at 2: its values must be above.
			{Key: "a", First: 7, Count: 2, Start: ms(0), End: ms(1)},
			{Key: "a", First: 2, Count: 1, Start: ms(2), End: ms(9)},
			{Key: "a", First: 9, Count: 1, Start: ms(3), End: ms(4)},
		},
	}
	for name, calls := range cases {
		v := Check(calls, 0)
		if len(v) == 0 {
			t.Errorf("%s: no violation found", name)
			continue
		}
		want := name
		if name == "order-equal-ends" {
			want = "order"
		}
		if v[0].Rule != want {
			t.Errorf("%s: first violation %v, want rule %s", name, v[0], want)
		}
	}
	var r Recorder
	r.Add(Call{Key: "x", First: 1, Count: 1})
	r.Add(Call{Key: "x", First: 1, Count: 0})
	if r.Len() != 1 {
		t.Fatalf("recorder holds %d calls, want 1 (count 0 ignored)", r.Len())
	}
}
