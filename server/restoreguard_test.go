package server_test

import (
	"strings"
	"testing"
	"time"

	firnv1 "github.com/firnid/firn/client/firnv1"
	"github.com/firnid/firn/generator"
	"github.com/firnid/firn/internal/testing/etcdtest"
	"github.com/firnid/firn/server/core"
)

// The restore guard (docs/design.md, Restores): on a shared coordinator a
// take starts above now + window + max-lead + 2 × skew, whatever the
// coordinator shows, so a holder a restore made the coordinator forget —
// serving on a reservation it acknowledged before — can never have issued
// what the take issues. The node says why it waits, and serves once the
// clock is within max-lead of the guard. On the node's own embedded
// coordinator a take waits for nothing.
func TestRestoreGuard(t *testing.T) {
	snow, _ := generator.Preset("snowflake")
	for _, shared := range []bool{true, false} {
		t.Run(map[bool]string{true: "shared", false: "private"}[shared], func(t *testing.T) {
			e := etcdtest.StartEmbedded(t)
			opts := []func(*core.Config){func(c *core.Config) {
				c.Timing.Timeout, c.Timing.ReservationWindow = 500*time.Millisecond, 2500*time.Millisecond
				c.MaxPeerSkew = 500 * time.Millisecond
			}}
			if shared {
				opts = append(opts, sharedCoordinator)
			}
			start := wallNow()
			n := startNode(t, e.Endpoints, t.TempDir(), opts...)
			cfg := n.cfg
			guard := cfg.RestoreGuard(cfg.Generators[0])
			if want := 2500*time.Millisecond + time.Second + 2*500*time.Millisecond; shared && guard != want {
				t.Fatalf("guard %v, want window + max-lead + 2 × max-peer-skew = %v", guard, want)
			}
			if !shared && guard != 0 {
				t.Fatalf("guard %v on a private coordinator, want 0", guard)
			}
			if shared {
				// Refused meanwhile, naming the guard.
				deadline := time.Now().Add(2 * time.Second)
				for {
					info := n.genInfo(t, "default")
					if !info.GetServing() && strings.Contains(info.GetReason(), "restore guard") {
						break
					}
					if time.Now().After(deadline) {
						t.Fatalf("never said it waits for the restore guard; reason %q", info.GetReason())
					}
					time.Sleep(20 * time.Millisecond)
				}
			}
			waitServing(t, n.ids, "", 15*time.Second)
			ready := wallNow()
			resp, err := n.ids.NextID(ctx(t), &firnv1.NextIDRequest{})
			if err != nil {
				t.Fatal(err)
			}
			p, _ := snow.Decode(resp.GetId())
			t.Logf("served %v after the start; first ID's time %v after it", ready.Sub(start).Round(time.Millisecond),
				p.Time.Sub(start).Round(time.Millisecond))
			if shared {
				if !p.Time.After(start.Add(guard)) {
					t.Fatalf("first ID's time %v, not above the start + guard %v", p.Time, start.Add(guard))
				}
				if d := ready.Sub(start); d < guard-cfg.Generators[0].MaxLead-time.Second {
					t.Fatalf("served %v after the start: the guard %v less max-lead was not waited", d, guard)
				}
			} else if d := ready.Sub(start); d > 5*time.Second {
				t.Fatalf("served %v after the start on a private coordinator", d)
			}
		})
	}
}
