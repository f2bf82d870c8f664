package datadir

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/firnid/firn/coordinator"
)

// A save that waits on a stalled disk must not hold the state's lock:
// Acked, which each holder's Reserver calls after every acknowledged
// write (core.boundedJournal lets it run inline while its own holder
// writes nothing), and the readers (LocalFloor, AckedFor) only touch
// memory. Held across the fsync, the lock ties every holder of a wide
// generator to the one whose write stalled: a holder whose Reserve was
// answered while another's write stalls blocks in Acked for as long as
// the disk does, its Reserver's loop with it, and SIGTERM waits for that
// holder past --shutdown-timeout (the bounded journal bounds only the
// writer).
func TestStalledSaveLeavesStateLockFree(t *testing.T) {
	s, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	g, err := s.Generator("wide")
	if err != nil {
		t.Fatal(err)
	}
	a, b := coordinator.Slot{Worker: 1}, coordinator.Slot{Worker: 2}
	if err := g.BeforeReserve(a, 100); err != nil {
		t.Fatal(err)
	}
	entered, release := make(chan struct{}), make(chan struct{})
	syncSlot = func(f *os.File) error {
		close(entered)
		<-release
		return f.Sync()
	}
	defer func() { syncSlot = (*os.File).Sync }()
	wrote := make(chan error, 1)
	go func() { wrote <- g.BeforeReserve(a, 200) }() // worker 1's write: the disk stalls
	<-entered
	syncSlot = (*os.File).Sync // the next saves' disk is fine
	if !g.mu.TryLock() {
		close(release)
		<-wrote
		t.Fatal("a save waiting on the disk holds the state lock: worker 2's Acked, and every reader, waits for the disk")
	}
	g.mu.Unlock()
	g.Acked(b, 150) // worker 2's Reserve(150) was answered meanwhile
	if got := g.AckedFor(b); got != 150 {
		t.Fatalf("AckedFor(worker 2) %d, want 150", got)
	}
	close(release)
	if err := <-wrote; err != nil {
		t.Fatal(err)
	}
	if err := g.Flush(); err != nil {
		t.Fatal(err)
	}
	s2, _ := Open(filepath.Dir(s.Dir()))
	g2, err := s2.Generator("wide")
	if err != nil {
		t.Fatal(err)
	}
	if g2.LocalFloor() != 200 || g2.AckedFor(b) != 150 {
		t.Fatalf("after a reload: LocalFloor %d, worker 2 acked %d; want 200 and 150", g2.LocalFloor(), g2.AckedFor(b))
	}
}
