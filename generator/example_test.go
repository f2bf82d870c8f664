package generator_test

import (
	"fmt"
	"time"

	"github.com/firnid/firn/generator"
)

// Decoding an ID a node issued: its time, datacenter, worker and sequence
// number, as `firn decode` shows them.
func ExampleLayout_Decode() {
	l, _ := generator.Preset("snowflake")
	p, err := l.Decode(1541815603606036480)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(p.Time.UTC().Format(time.RFC3339Nano), p.Datacenter, p.Worker, p.Sequence)
	// Output: 2022-06-28T16:07:40.105Z 11 26 0
}

// A layout is read from any order of its keys and written in one
// canonical form, the one a cluster pins. Validate checks it against a
// clock reading (this package reads none): a layout wider than 63 bits is
// refused, naming the bound.
func ExampleParseLayout() {
	l, err := generator.ParseLayout("seq=12, worker=10, time=41, epoch=2024-01-01T00:00:00Z")
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(l)
	now := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	fmt.Println(l.Validate(now))
	wide, _ := generator.ParseLayout("time=41,worker=12,seq=12,epoch=2024-01-01T00:00:00Z")
	fmt.Println(wide.Validate(now))
	// Output:
	// time=41,dc=0,worker=10,seq=12,unit=1ms,epoch=2024-01-01T00:00:00Z
	// <nil>
	// generator: invalid layout: bits: time+dc+worker+seq = 65 exceeds 63 bits
}

// Building an ID from its fields never masks: a field too wide for the
// layout is an error naming it.
func ExampleLayout_Encode() {
	l, _ := generator.Preset("snowflake")
	id, _ := l.Encode(1000, 1, 7, 42)
	fmt.Println(id)
	_, err := l.Encode(1000, 1, 32, 0)
	fmt.Println(err)
	// Output:
	// 4194463786
	// generator: value does not fit its field: worker 32 exceeds 31 (5 bits)
}
