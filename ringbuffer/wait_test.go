package ringbuffer

import (
	"context"
	"errors"
	"testing"
	"time"
)

// stuck is a Source that waits, holding whatever its caller holds, until
// its context ends: a generator waiting for a reservation or the clock. As
// a TrySource it says it has nothing now.
type stuck struct{ entered chan struct{} }

func (s *stuck) TryBatch([]uint64) (int, error) {
	select {
	case s.entered <- struct{}{}:
	default:
	}
	return 0, nil
}

func (s *stuck) NextBatch(ctx context.Context, dst []uint64) (int, error) {
	select {
	case s.entered <- struct{}{}:
	default:
	}
	<-ctx.Done()
	return 0, ctx.Err()
}

// The filler never waits in its source while it holds the lock (it asks a
// TrySource for what it has now), so a source that would wait cannot hold
// Reset or Close, nor a caller's Generate. Before, a filler waiting in its
// source blocked both for as long as the source waited.
func TestFillerNeverWaitsUnderTheLock(t *testing.T) {
	for _, op := range []string{"Reset", "Close", "Generate"} {
		t.Run(op, func(t *testing.T) {
			b := newBuf(t, Config{Size: 256})
			src := &stuck{entered: make(chan struct{}, 1)}
			b.Reset(src)
			filled := make(chan struct{})
			go func() { b.fill(64); close(filled) }()
			<-src.entered
			select {
			case <-filled:
			case <-time.After(2 * time.Second):
				t.Fatal("the filler waits in its source")
			}
			done := make(chan struct{})
			go func() {
				switch op {
				case "Reset":
					b.Reset(&counter{perCall: 8})
				case "Close":
					b.Close()
				default:
					b.Reset(&counter{perCall: 8})
					if _, err := b.Generate(context.Background(), make([]uint64, 4)); err != nil {
						t.Error(err)
					}
				}
				close(done)
			}()
			select {
			case <-done:
			case <-time.After(2 * time.Second):
				t.Fatalf("%s still blocked after 2 s", op)
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
