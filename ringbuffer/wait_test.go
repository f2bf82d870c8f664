package ringbuffer

import (
	"context"
	"errors"
	"testing"
	"time"
)

// stuck is a Source that waits, holding whatever its caller holds, until
// its context ends: a generator waiting for a reservation or the clock.
type stuck struct{ entered chan struct{} }

func (s *stuck) NextBatch(ctx context.Context, dst []uint64) (int, error) {
	select {
	case s.entered <- struct{}{}:
	default:
	}
	<-ctx.Done()
	return 0, ctx.Err()
}

// Reset and Close cancel the source before they take the filler's lock, so
// a filler waiting in the source under that lock cannot hold them. Before,
// both blocked for as long as the source waited.
func TestResetAndCloseWakeAWaitingFiller(t *testing.T) {
	for _, op := range []string{"Reset", "Close"} {
		t.Run(op, func(t *testing.T) {
			b := newBuf(t, Config{Size: 256})
			src := &stuck{entered: make(chan struct{}, 1)}
			b.Reset(src)
			go b.fill(64)
			<-src.entered // the filler holds the lock, waiting in the source
			done := make(chan struct{})
			go func() {
				if op == "Reset" {
					b.Reset(&counter{perCall: 8})
				} else {
					b.Close()
				}
				close(done)
			}()
			select {
			case <-done:
			case <-time.After(2 * time.Second):
				t.Fatalf("%s still blocked after 2 s behind a waiting filler", op)
			}
		})
	}
}

// Generate takes the filler's lock with its caller's context: a caller
// whose deadline passes while another holds the lock returns at its
// deadline with the context's error, not after the holder.
func TestGenerateHonoursContextForTheLock(t *testing.T) {
	b := newBuf(t, Config{Size: 256})
	src := &stuck{entered: make(chan struct{}, 1)}
	b.Reset(src)
	hold, release := context.WithCancel(context.Background())
	defer release()
	go b.Generate(hold, make([]uint64, 1))
	<-src.entered
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := b.Generate(ctx, make([]uint64, 1))
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("got %v; want the caller's deadline", err)
	}
	if el := time.Since(start); el > time.Second {
		t.Fatalf("returned after %v", el)
	}
}
