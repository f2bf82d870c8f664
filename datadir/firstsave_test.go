package datadir

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/firnid/firn/coordinator"
)

// A crash during a generator's first save into the slots leaves a torn
// gen-<name>.1 and no gen-<name>.0 (slot 0 is first written by the second
// save). Nothing was acted on under that record (the Reserve it preceded
// was never sent), so the state is the one before it: the earlier
// version's gen-<name>.json after an upgrade, or none. The node must
// restart on it, as it does when the crash lost the new file altogether
// (its name not yet fsynced), not refuse for good as "unreadable".
func TestTornFirstSaveFallsBackToTheStateBefore(t *testing.T) {
	for _, tc := range []struct {
		name   string
		legacy string
		floor  int64
		keep   func(n int) int // how much of the record the crash left
	}{
		{"after an upgrade", `{"incarnation":"inc","last_reservation":777,"acked":{"0-2":700}}`, 777, func(n int) int { return n / 2 }},
		{"on a fresh data dir", "", -1, func(n int) int { return n / 2 }},
		// ext4's delayed allocation: after a crash, a new file that was
		// not fsynced is often there with no bytes.
		{"on a fresh data dir, empty", "", -1, func(int) int { return 0 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			s, err := Open(dir)
			if err != nil {
				t.Fatal(err)
			}
			if tc.legacy != "" {
				if err := os.WriteFile(filepath.Join(s.Dir(), "gen-m.json"), []byte(tc.legacy), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			g, err := s.Generator("m")
			if err != nil {
				t.Fatal(err)
			}
			if err := g.BeforeReserve(coordinator.Slot{Worker: 2}, 800); err != nil { // the first save: slot file .1
				t.Fatal(err)
			}
			// The crash tore that save: the file holds part of its record.
			first := filepath.Join(s.Dir(), "gen-m.1")
			b, err := os.ReadFile(first)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(first, b[:tc.keep(len(b))], 0o600); err != nil {
				t.Fatal(err)
			}
			if tc.legacy != "" { // the save removes it only after the slot is written
				if err := os.WriteFile(filepath.Join(s.Dir(), "gen-m.json"), []byte(tc.legacy), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			s2, err := Open(dir)
			if err != nil {
				t.Fatal(err)
			}
			g2, err := s2.Generator("m")
			if err != nil {
				t.Fatalf("restart after a crash in the first save: %v", err)
			}
			if g2.LocalFloor() != tc.floor {
				t.Fatalf("LocalFloor %d, want %d (the state before the torn save)", g2.LocalFloor(), tc.floor)
			}
			// The next save overwrites the torn file and is read back.
			if err := g2.BeforeReserve(coordinator.Slot{Worker: 2}, 900); err != nil {
				t.Fatal(err)
			}
			s3, _ := Open(dir)
			g3, err := s3.Generator("m")
			if err != nil || g3.LocalFloor() != 900 {
				t.Fatalf("after the next save: %v, %v; want LocalFloor 900", g3, err)
			}
		})
	}
}

// A whole first record that fails its checksum is no crash's work on a
// new file (a crash leaves it empty, zeros or cut short): the medium
// changed it after the save, and Reserves may have been sent under it.
// It stays refused.
func TestCorruptFirstSaveStaysRefused(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	g, err := s.Generator("m")
	if err != nil {
		t.Fatal(err)
	}
	if err := g.BeforeReserve(coordinator.Slot{Worker: 2}, 800); err != nil {
		t.Fatal(err)
	}
	first := filepath.Join(s.Dir(), "gen-m.1")
	b, err := os.ReadFile(first)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)-2] ^= 0x01 // inside the payload
	if err := os.WriteFile(first, b, 0o600); err != nil {
		t.Fatal(err)
	}
	s2, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s2.Generator("m"); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("a first record that fails its checksum: %v, want ErrCorrupt", err)
	}
}
