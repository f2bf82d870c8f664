package etcd_test

import (
	"testing"

	"github.com/firnid/firn/coordinator/etcd"
)

// FuzzDecodeReserved: a stored number (a reservation, the floor) is read
// only in its canonical 19-digit form, so a value is never guessed at nor
// compared as text: what parses encodes back to the same bytes.
func FuzzDecodeReserved(f *testing.F) {
	for _, s := range []string{"0000000000000000042", "42", "-000000000000000001", "+000000000000000042", "9223372036854775807", "9999999999999999999", ""} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		v, err := etcd.DecodeReserved(b)
		if err == nil && etcd.EncodeReserved(v) != string(b) {
			t.Fatalf("DecodeReserved(%q) = %d, which is stored as %q", b, v, etcd.EncodeReserved(v))
		}
	})
}
