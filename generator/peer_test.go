package generator_test

import (
	"testing"

	"github.com/sony/sonyflake"

	"github.com/firnid/firn/generator"
)

// The sonyflake preset means its name: IDs made by sony/sonyflake decode
// under it to the fields sonyflake itself reports.
func TestSonyflakePresetDecodesSonyIDs(t *testing.T) {
	l, ok := generator.Preset("sonyflake")
	if !ok {
		t.Fatal("no sonyflake preset")
	}
	for _, machine := range []uint16{0, 1, 0x1234, 0xffff} {
		sf := sonyflake.NewSonyflake(sonyflake.Settings{MachineID: func() (uint16, error) { return machine, nil }})
		if sf == nil {
			t.Fatal("sonyflake.NewSonyflake refused its settings")
		}
		for range 300 { // more than one 10 ms unit's 256 IDs
			id, err := sf.NextID()
			if err != nil {
				t.Fatal(err)
			}
			want := sonyflake.Decompose(id)
			p, err := l.Decode(id)
			if err != nil {
				t.Fatalf("Decode(%d): %v", id, err)
			}
			if uint64(p.Units) != want["time"] || p.Sequence != want["sequence"] || p.Worker != want["machine-id"] || p.Datacenter != 0 {
				t.Fatalf("ID %d: decoded time %d seq %d worker %d dc %d; sonyflake says %v", id, p.Units, p.Sequence, p.Worker, p.Datacenter, want)
			}
			back, err := l.Encode(p.Units, p.Datacenter, p.Worker, p.Sequence)
			if err != nil || back != id {
				t.Fatalf("Encode(Decode(%d)) = %d, %v", id, back, err)
			}
		}
	}
}
