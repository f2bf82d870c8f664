package coordinator

import (
	"bytes"
	"encoding/json"
	"errors"
	"testing"
	"time"
)

// FuzzParseSlotKey: a slot name is read only in the form Key writes, so
// no two names stand for one slot; every slot's Key reads back as itself.
func FuzzParseSlotKey(f *testing.F) {
	for _, s := range []string{"0-0", "3-1023", "01-2", "1-2-3", "+1-2", "-", "1-", "18446744073709551615-0", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		s, ok := ParseSlotKey(name)
		if ok && s.Key() != name {
			t.Fatalf("ParseSlotKey(%q) = %v, whose Key is %q", name, s, s.Key())
		}
		back, ok := ParseSlotKey(Slot{Datacenter: uint64(len(name)), Worker: uint64(len(name)) * 7}.Key())
		if !ok || back != (Slot{Datacenter: uint64(len(name)), Worker: uint64(len(name)) * 7}) {
			t.Fatalf("a Key did not read back: %v %v", back, ok)
		}
	})
}

// FuzzDecodeRestore: a stored restore marker either reads as evidence that
// validates and encodes back to what reads the same, or is an error
// matching ErrRestored (it still stands) — never a panic, never evidence
// with a gap that is not positive.
func FuzzDecodeRestore(f *testing.F) {
	ev := RestoreEvidence{Generator: "g", Slot: Slot{Worker: 3}, Acked: 500, Shown: 200,
		At: time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC), Node: NodeInfo{Name: "n", InstanceID: "i"}}
	f.Add(EncodeRestore(ev))
	f.Add([]byte(`{"generator":"g","acked":1,"shown":2}`))
	f.Add([]byte(`not json`))
	f.Add([]byte(`{}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		got, err := DecodeRestore("fuzz", b)
		if err != nil {
			if !errors.Is(err, ErrRestored) {
				t.Fatalf("DecodeRestore(%q): %v, not matching ErrRestored", b, err)
			}
			return
		}
		if err := got.Validate(); err != nil {
			t.Fatalf("DecodeRestore(%q) returned evidence that does not validate: %v", b, err)
		}
		again, err := DecodeRestore("fuzz", EncodeRestore(got))
		if err != nil || !bytes.Equal(EncodeRestore(again), EncodeRestore(got)) {
			t.Fatalf("evidence %+v does not survive encoding: %+v, %v", got, again, err)
		}
	})
}

// FuzzDecodeOwner: any stored owner record reads as a record — an
// unreadable one as owned by an unknown holder — never a panic.
func FuzzDecodeOwner(f *testing.F) {
	f.Add(EncodeOwner(Heartbeat{Node: NodeInfo{Name: "n", InstanceID: "i"}, Wall: time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)}))
	f.Add([]byte(`{"name":1}`))
	f.Add([]byte{0xff})
	f.Fuzz(func(t *testing.T, b []byte) {
		r := DecodeOwner(b)
		if !json.Valid(b) && (r.Name != "?" || r.Instance != "?") {
			t.Fatalf("DecodeOwner(%q) = %+v: an unreadable record must name an unknown holder", b, r)
		}
	})
}
