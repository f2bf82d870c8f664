package coordinator

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"time"
)

// Pin is what the first node of a generator writes, create-if-absent, and
// every Acquire checks: both backends store it as this JSON.
type Pin struct {
	Layout      string `json:"layout"`
	Datacenter  int64  `json:"datacenter"` // -1: from the cursor
	Incarnation string `json:"incarnation"`
	Schema      int    `json:"schema"`
}

// NewPin is the pin a first node writes for spec, with a random
// incarnation ID.
func NewPin(spec Spec) Pin {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return Pin{Layout: spec.Layout, Datacenter: spec.Datacenter, Incarnation: hex.EncodeToString(b[:]), Schema: SchemaVersion}
}

// Check refuses a pin written by a newer binary (ErrSchemaTooNew) or for
// another layout or fixed datacenter (*LayoutMismatchError naming both).
func (p Pin) Check(spec Spec) error {
	if p.Schema > SchemaVersion {
		return fmt.Errorf("%w: generator %q pin schema %d, this binary knows %d",
			ErrSchemaTooNew, spec.Generator, p.Schema, SchemaVersion)
	}
	if p.Layout != spec.Layout || p.Datacenter != spec.Datacenter {
		return &LayoutMismatchError{
			Generator: spec.Generator, Pinned: p.Layout, Wanted: spec.Layout,
			PinnedDatacenter: p.Datacenter, WantedDatacenter: spec.Datacenter,
		}
	}
	return nil
}

// OwnerRecord is the value of owner/<slot> in both backends: the holder
// and its heartbeat.
type OwnerRecord struct {
	Name      string    `json:"name"`
	Instance  string    `json:"instance"`
	Address   string    `json:"address"`
	StartTime time.Time `json:"start"`
	Wall      time.Time `json:"heartbeat"`
}

// EncodeOwner is the owner record for a heartbeat.
func EncodeOwner(hb Heartbeat) []byte {
	b, _ := json.Marshal(OwnerRecord{
		Name: hb.Node.Name, Instance: hb.Node.InstanceID, Address: hb.Node.Address,
		StartTime: hb.Node.StartTime, Wall: hb.Wall,
	})
	return b
}

// DecodeOwner reads an owner record; an unreadable one still means
// "owned", by an unknown holder ("?").
func DecodeOwner(b []byte) OwnerRecord {
	var r OwnerRecord
	if err := json.Unmarshal(b, &r); err != nil {
		return OwnerRecord{Name: "?", Instance: "?"}
	}
	return r
}

// Heartbeat is the record as a Heartbeat.
func (r OwnerRecord) Heartbeat() Heartbeat {
	return Heartbeat{
		Node: NodeInfo{Name: r.Name, InstanceID: r.Instance, Address: r.Address, StartTime: r.StartTime},
		Wall: r.Wall,
	}
}

// restoreRecord is the stored form of a restore marker: both backends
// store it as this JSON (etcd key <generator>/restored, ZooKeeper node
// <generator>/restored).
type restoreRecord struct {
	Generator  string    `json:"generator"`
	Datacenter uint64    `json:"datacenter"`
	Worker     uint64    `json:"worker"`
	Acked      int64     `json:"acked"`
	Shown      int64     `json:"shown"`
	At         time.Time `json:"at"`
	Name       string    `json:"node"`
	Instance   string    `json:"instance"`
	Address    string    `json:"address"`
	StartTime  time.Time `json:"start"`
	Counter    bool      `json:"counter,omitempty"`
}

// EncodeRestore is the stored form of a restore marker.
func EncodeRestore(ev RestoreEvidence) []byte {
	b, _ := json.Marshal(restoreRecord{
		Generator: ev.Generator, Datacenter: ev.Slot.Datacenter, Worker: ev.Slot.Worker,
		Acked: ev.Acked, Shown: ev.Shown, At: ev.At,
		Name: ev.Node.Name, Instance: ev.Node.InstanceID, Address: ev.Node.Address, StartTime: ev.Node.StartTime,
		Counter: ev.Counter,
	})
	return b
}

// DecodeRestore reads a stored restore marker. A marker that does not
// parse, or whose gap is not positive, is an error matching ErrRestored
// naming where it is stored (where): it still stands, and only an operator
// can judge it.
func DecodeRestore(where string, b []byte) (RestoreEvidence, error) {
	var r restoreRecord
	if err := json.Unmarshal(b, &r); err != nil {
		return RestoreEvidence{}, fmt.Errorf("%w: restore marker %s is not readable (%v): it blocks every acquisition of its generator; check it and delete it by hand", ErrRestored, where, err)
	}
	ev := RestoreEvidence{
		Generator: r.Generator, Slot: Slot{Datacenter: r.Datacenter, Worker: r.Worker},
		Acked: r.Acked, Shown: r.Shown, At: r.At,
		Node:    NodeInfo{Name: r.Name, InstanceID: r.Instance, Address: r.Address, StartTime: r.StartTime},
		Counter: r.Counter,
	}
	if err := ev.Validate(); err != nil {
		return RestoreEvidence{}, fmt.Errorf("%w: restore marker %s holds %s (%v): it blocks every acquisition of its generator; check it and delete it by hand", ErrRestored, where, b, err)
	}
	return ev, nil
}
