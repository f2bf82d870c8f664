package zookeeper_test

import (
	"bytes"
	"testing"

	"github.com/firnid/firn/coordinator/zookeeper"
)

// FuzzParseValue: a stored number (a reservation, the floor, the cursor)
// is read only in the form firn writes it, so a node's bytes are never
// guessed at: what parses encodes back to the same bytes.
func FuzzParseValue(f *testing.F) {
	for _, s := range []string{"-1", "0", "42", "042", "+42", " 42", "4e2", "9223372036854775807", "9223372036854775808", ""} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		v, err := zookeeper.ParseValue(b)
		if err == nil && !bytes.Equal(zookeeper.EncodeValue(v), b) {
			t.Fatalf("ParseValue(%q) = %d, which is stored as %q", b, v, zookeeper.EncodeValue(v))
		}
	})
}
