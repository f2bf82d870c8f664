package coordinator

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"testing/synctest"
	"time"
)

// stubLease is the lease an attempt returns: RetryAcquire only passes it on.
type stubLease struct{ Lease }

// RetryAcquire, the loop every backend's Acquire runs, in virtual time: a
// lost race is tried again at once, unavailability after a pause that
// doubles with each attempt up to 500 ms, any other error never; stop ends it; the caller's
// deadline ends it with an error that matches both ErrUnavailable and the
// context's error and names the last failure.
func TestRetryAcquire(t *testing.T) {
	unavailable := fmt.Errorf("%w: no leader", ErrUnavailable)
	type step struct {
		err error
		at  time.Duration // when the attempt ran, from the start
	}
	run := func(t *testing.T, ctx context.Context, results []error, stop func(error) bool) (Lease, error, []step) {
		t.Helper()
		start := time.Now()
		var steps []step
		l, err := RetryAcquire(ctx, "test", func(context.Context) (Lease, error) {
			i := len(steps)
			var e error
			if i < len(results) {
				e = results[i]
			}
			steps = append(steps, step{e, time.Since(start)})
			if e != nil {
				return nil, e
			}
			return stubLease{}, nil
		}, stop, SleepCtx)
		return l, err, steps
	}
	never := func(error) bool { return false }

	t.Run("races, then unavailable, then taken", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			l, err, steps := run(t, context.Background(), []error{ErrRescan, ErrRescan, unavailable, unavailable, unavailable, nil}, never)
			if err != nil || l == nil {
				t.Fatalf("got %v, %v; want a lease", l, err)
			}
			// Rescans at once; after an unavailable attempt, a pause of
			// 50 ms doubled per attempt before it (rescans count), at most
			// 500 ms: 200, 400, 500 ms after the third, fourth and fifth.
			want := []time.Duration{0, 0, 0, 200 * time.Millisecond, 600 * time.Millisecond, 1100 * time.Millisecond}
			if len(steps) != len(want) {
				t.Fatalf("%d attempts, want %d", len(steps), len(want))
			}
			for i, s := range steps {
				if s.at != want[i] {
					t.Errorf("attempt %d at %v, want %v", i+1, s.at, want[i])
				}
			}
		})
	})
	t.Run("another error is returned at once", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			_, err, steps := run(t, context.Background(), []error{ErrLayoutMismatch}, never)
			if !errors.Is(err, ErrLayoutMismatch) || len(steps) != 1 {
				t.Fatalf("%v after %d attempts; want ErrLayoutMismatch after one", err, len(steps))
			}
		})
	})
	t.Run("stop ends it", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			_, err, steps := run(t, context.Background(), []error{unavailable, unavailable}, func(error) bool { return true })
			if err != unavailable || len(steps) != 1 {
				t.Fatalf("%v after %d attempts; want the attempt's error after one", err, len(steps))
			}
		})
	})
	t.Run("the caller's deadline", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 120*time.Millisecond)
			defer cancel()
			results := make([]error, MaxAcquireAttempts)
			for i := range results {
				results[i] = unavailable
			}
			_, err, steps := run(t, ctx, results, never)
			if !errors.Is(err, ErrUnavailable) || !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, unavailable) {
				t.Fatalf("%v; want ErrUnavailable, DeadlineExceeded and the last failure", err)
			}
			if len(steps) != 2 { // at 0 and 50 ms; the next pause runs past 120 ms
				t.Fatalf("%d attempts before the deadline, want 2", len(steps))
			}
		})
	})
	t.Run("every attempt lost a race", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			results := make([]error, MaxAcquireAttempts)
			for i := range results {
				results[i] = ErrRescan
			}
			_, err, steps := run(t, context.Background(), results, never)
			if !errors.Is(err, ErrUnavailable) || len(steps) != MaxAcquireAttempts {
				t.Fatalf("%v after %d attempts; want ErrUnavailable after %d", err, len(steps), MaxAcquireAttempts)
			}
		})
	})
}
