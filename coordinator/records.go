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
