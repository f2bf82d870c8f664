package coordinator

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// ErrRescan is what one acquisition attempt of a backend returns when
// what it scanned changed under it (a take lost to another, a pin or a
// floor written meanwhile): RetryAcquire scans again at once.
var ErrRescan = errors.New("coordinator: scan again")

// MaxAcquireAttempts bounds the attempts of one Acquire.
const MaxAcquireAttempts = 30

// RetryAcquire is the acquisition loop every backend's Acquire runs:
// attempt is one scan and take. It is tried again at once after
// ErrRescan; after an error matching ErrUnavailable, unless stop says the
// error or the backend is final, after a pause (through sleep: 50 ms
// doubled for each attempt made, rescans too, at most 500 ms); after any
// other error, never. When ctx ends during a pause the error matches
// ErrUnavailable and ctx's error, and names the last failure; after
// MaxAcquireAttempts it is the last failure.
func RetryAcquire(ctx context.Context, backend string, attempt func(context.Context) (Lease, error),
	stop func(error) bool, sleep func(context.Context, time.Duration) error) (Lease, error) {
	var last error
	for i := range MaxAcquireAttempts {
		l, err := attempt(ctx)
		switch {
		case err == nil:
			return l, nil
		case errors.Is(err, ErrRescan):
			continue
		case !errors.Is(err, ErrUnavailable) || stop(err) || errors.Is(err, ErrEndedWaiting):
			return nil, err
		}
		last = err
		if err := sleep(ctx, min(50*time.Millisecond<<i, 500*time.Millisecond)); err != nil {
			if ctx.Err() != nil {
				return nil, fmt.Errorf("%w: %w (last error: %w)", ErrUnavailable, ctx.Err(), last)
			}
			return nil, last
		}
	}
	if last == nil {
		last = fmt.Errorf("%w: %s acquire: %d attempts lost races", ErrUnavailable, backend, MaxAcquireAttempts)
	}
	return nil, last
}

// SleepCtx waits d, or returns ctx's error when it ends first.
func SleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
