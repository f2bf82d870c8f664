package server

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/firnid/firn/coordinator"
)

// ErrDataDirMoved: the data dir's recorded machine or path differs from
// where it is now (a copy would make two nodes one identity).
var ErrDataDirMoved = errors.New("data dir copied or moved")

// DataDir is the node's state in --data-dir: its identity (instance ID,
// machine, path) and, per generator, its own last reservation, the pin
// incarnation it saw and the last reservation acknowledged per slot. Every
// change is written to a temporary file, fsynced, renamed into place and
// the directory fsynced.
type DataDir struct {
	path string
	mu   sync.Mutex
	st   dataState
}

type dataState struct {
	Schema     int                  `json:"schema"`
	InstanceID string               `json:"instance_id"`
	MachineID  string               `json:"machine_id"`
	Path       string               `json:"path"`
	Generators map[string]*genState `json:"generators"`
}

type genState struct {
	// LastReservation: raised before each Reserve is sent, lowered with
	// Release; a restart starts above it.
	LastReservation int64            `json:"last_reservation"`
	Incarnation     string           `json:"incarnation,omitempty"`
	Acked           map[string]int64 `json:"acked,omitempty"`
}

const stateFile = "node.json"

// MachineID reads /etc/machine-id, or falls back to the hostname.
func MachineID() string {
	if b, err := os.ReadFile("/etc/machine-id"); err == nil {
		if s := strings.TrimSpace(string(b)); s != "" {
			return s
		}
	}
	h, _ := os.Hostname()
	return "host:" + h
}

// OpenDataDir opens (creating at first start) the node state in dir. It
// refuses with ErrDataDirMoved when the recorded machine ID or path differs,
// unless acceptMoved (then it records the new place).
func OpenDataDir(dir string, acceptMoved bool) (*DataDir, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(abs, 0o700); err != nil {
		return nil, fmt.Errorf("--data-dir: %w", err)
	}
	d := &DataDir{path: abs}
	b, err := os.ReadFile(filepath.Join(abs, stateFile))
	switch {
	case errors.Is(err, os.ErrNotExist):
		id := make([]byte, 16)
		rand.Read(id)
		d.st = dataState{Schema: 1, InstanceID: hex.EncodeToString(id), MachineID: MachineID(), Path: abs,
			Generators: map[string]*genState{}}
		return d, d.saveLocked()
	case err != nil:
		return nil, fmt.Errorf("--data-dir: %w", err)
	}
	if err := json.Unmarshal(b, &d.st); err != nil {
		return nil, fmt.Errorf("--data-dir: %s is corrupt: %w", filepath.Join(abs, stateFile), err)
	}
	if d.st.Generators == nil {
		d.st.Generators = map[string]*genState{}
	}
	machine := MachineID()
	if d.st.MachineID != machine || d.st.Path != abs {
		if !acceptMoved {
			return nil, fmt.Errorf("%w: %s was created on machine %s at %s; here it is machine %s at %s (start with --accept-moved-data-dir only if the original will never run again)",
				ErrDataDirMoved, abs, d.st.MachineID, d.st.Path, machine, abs)
		}
		d.st.MachineID, d.st.Path = machine, abs
		if err := d.saveLocked(); err != nil {
			return nil, err
		}
	}
	return d, nil
}

// Path is the absolute data dir.
func (d *DataDir) Path() string { return d.path }

// InstanceID implements LocalState.
func (d *DataDir) InstanceID() string { return d.st.InstanceID }

func (d *DataDir) gen(name string) *genState {
	g := d.st.Generators[name]
	if g == nil {
		g = &genState{LastReservation: -1}
		d.st.Generators[name] = g
	}
	return g
}

// LastReservation implements LocalState.
func (d *DataDir) LastReservation(generator string) int64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	if g := d.st.Generators[generator]; g != nil {
		return g.LastReservation
	}
	return -1
}

// RecordReservation implements LocalState: raise, fsynced, before the
// Reserve is sent.
func (d *DataDir) RecordReservation(generator string, r int64) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	g := d.gen(generator)
	if r <= g.LastReservation {
		return nil
	}
	g.LastReservation = r
	return d.saveLocked()
}

// LowerReservation implements LocalState (after a Release lowered the
// slot's reservation to r): the node's own record and the slot's
// acknowledged value both become r.
func (d *DataDir) LowerReservation(generator string, slot coordinator.Slot, r int64) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	g := d.gen(generator)
	g.LastReservation = r
	if g.Acked == nil {
		g.Acked = map[string]int64{}
	}
	g.Acked[slotKey(slot)] = r
	return d.saveLocked()
}

func slotKey(s coordinator.Slot) string { return fmt.Sprintf("%d-%d", s.Datacenter, s.Worker) }

// CheckAcquired implements LocalState.
func (d *DataDir) CheckAcquired(generator string, lease coordinator.Lease) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	g := d.gen(generator)
	if g.Incarnation != "" && g.Incarnation != lease.Incarnation() {
		return fmt.Errorf("%w: generator %q was pinned with incarnation %s, the coordinator now shows %s (its data was wiped or replaced; after a restore run `firn coordinator bump`, then remove this node's record only if you are sure)",
			coordinator.ErrRecreated, generator, g.Incarnation, lease.Incarnation())
	}
	slot := lease.Slot()
	if acked, ok := g.Acked[slotKey(slot)]; ok && lease.ReadReserved() < acked {
		return &coordinator.RolledBackError{Generator: generator, Slot: slot, Seen: lease.ReadReserved(), Acked: acked}
	}
	if g.Incarnation == "" {
		g.Incarnation = lease.Incarnation()
		return d.saveLocked()
	}
	return nil
}

// RecordAck implements LocalState.
func (d *DataDir) RecordAck(generator string, slot coordinator.Slot, r int64) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	g := d.gen(generator)
	if g.Acked == nil {
		g.Acked = map[string]int64{}
	}
	k := slotKey(slot)
	if r <= g.Acked[k] {
		return nil
	}
	g.Acked[k] = r
	return d.saveLocked()
}

// ForgetAcks drops the acknowledged reservations and incarnations (after an
// operator's `firn coordinator bump` over a restored coordinator).
func (d *DataDir) ForgetAcks() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, g := range d.st.Generators {
		g.Acked, g.Incarnation = nil, ""
	}
	return d.saveLocked()
}

func (d *DataDir) saveLocked() error {
	b, err := json.MarshalIndent(d.st, "", "  ")
	if err != nil {
		return err
	}
	final := filepath.Join(d.path, stateFile)
	tmp, err := os.CreateTemp(d.path, stateFile+".tmp-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), final); err != nil {
		return err
	}
	dir, err := os.Open(d.path)
	if err != nil {
		return err
	}
	defer dir.Close()
	return dir.Sync()
}

var _ LocalState = (*DataDir)(nil)
