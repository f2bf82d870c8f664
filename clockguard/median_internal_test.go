package clockguard

import (
	"testing"
	"time"
)

func TestMedianOffset(t *testing.T) {
	ms := time.Millisecond
	for _, tc := range []struct {
		name string
		in   []time.Duration
		want time.Duration
	}{
		{"one", []time.Duration{7 * ms}, 7 * ms},
		{"two: mean of both", []time.Duration{-10 * ms, 30 * ms}, 10 * ms},
		{"three unsorted", []time.Duration{30 * ms, -5 * ms, 10 * ms}, 10 * ms},
		{"falseticker outvoted", []time.Duration{time.Hour, 2 * ms, 3 * ms}, 3 * ms},
		{"four: mean of the middle two", []time.Duration{40 * ms, 1 * ms, 2 * ms, -40 * ms}, 1500 * time.Microsecond},
		{"odd nanosecond mean rounds toward the lower", []time.Duration{1, 2}, 1},
		{"extremes do not overflow", []time.Duration{1<<62 + 1<<61, 1<<62 + 1<<61}, 1<<62 + 1<<61},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := medianOffset(append([]time.Duration(nil), tc.in...)); got != tc.want {
				t.Fatalf("medianOffset(%v) = %v, want %v", tc.in, got, tc.want)
			}
		})
	}
}
