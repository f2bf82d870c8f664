package datadir

import (
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/firnid/firn/coordinator"
)

// A record written by a later version (a slot header "firn-state 2") is
// no torn write: after a downgrade it is the newest record, and the slot
// beside it holds an older one, with a smaller last reservation. Taking
// that one would start the node below reservations it made; the load
// must refuse, naming the newer format, as the coordinator's records of
// a newer schema are refused.
func TestNewerFormatRefusedNotSkipped(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	g, err := s.Generator("g")
	if err != nil {
		t.Fatal(err)
	}
	slot := coordinator.Slot{Worker: 1}
	for _, v := range []int64{100, 200} { // sequence 1 in .1, sequence 2 in .0
		if err := g.BeforeReserve(slot, v); err != nil {
			t.Fatal(err)
		}
	}
	// The upgraded binary writes sequence 3 into .1 in its own format,
	// whole and fsynced, with its reservation 500; then it is rolled back.
	payload := []byte(`{"incarnation":"","last_reservation":500,"acked":{"0-1":500},"format":2}`)
	rec := fmt.Sprintf("firn-state 2 3 %d %08x\n%s", len(payload), crc32.Checksum(payload, castagnoli), payload)
	if err := os.WriteFile(filepath.Join(s.Dir(), "gen-g.1"), []byte(rec), 0o600); err != nil {
		t.Fatal(err)
	}
	s2, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	g2, err := s2.Generator("g")
	if err == nil {
		t.Fatalf("a record of a newer format was skipped as torn: LocalFloor %d from the older record, below the newer one's 500", g2.LocalFloor())
	}
	if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "newer") {
		t.Fatalf("refused with %v; want ErrCorrupt naming a newer format", err)
	}
}
