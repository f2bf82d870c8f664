package sections

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/firnid/firn/coordinator/memory"
	"github.com/firnid/firn/segment"
)

// TestFailingMemberLeavesItsSections: node a serves every section; node b
// joins, so a gives b's share up, but b's takes fail for good (its data
// dir refuses every mark). b stays not ready, naming the failure; its
// share must not stay without an owner for ever while a, ready, refuses
// those keys ("no live owner holds its lease"): a must serve every
// section again.
func TestFailingMemberLeavesItsSections(t *testing.T) {
	st := memory.New(memory.Config{TTL: 2 * time.Second})
	const why = "data dir: no space left on device"
	a, _ := start(t, st, "a", 4, 0, 0)
	waitServing(t, a, 4)
	var ch <-chan error
	start(t, st, "b", 4, 0, 0, func(c *Config) {
		ch = notes(c)
		c.Record = func(segment.Mark) error { return errors.New(why) }
	})
	err := waitNote(t, ch, "b's takes failing", func(err error) bool {
		var se *StartingError
		return errors.As(err, &se) && se.Err != nil && strings.Contains(err.Error(), why)
	})
	t.Logf("b told: %v", err)
	ctx := context.Background()
	for s := range 4 {
		k := keyOf(a, s)
		for end := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			_, err := a.Next(ctx, k, 1)
			if err == nil {
				break
			}
			if time.Now().After(end) {
				t.Fatalf("after 10 s, a (stats %+v) still refuses section %d, whose assigned owner b cannot take it: %v", a.Stats(), s, err)
			}
		}
	}
}
