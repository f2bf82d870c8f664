package core_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/firnid/firn/clockguard"
	"github.com/firnid/firn/coordinator"
	"github.com/firnid/firn/coordinator/memory"
	"github.com/firnid/firn/generator"
	"github.com/firnid/firn/server/core"
)

// A node that has not read the generators' definitions yet (the read
// fails: the coordinator does not answer it) cannot know whether a name
// it does not run by its flags is defined there. A call naming one
// defined only in the coordinator must be refused with that cause (not
// serving, STARTING, naming the read), as the node's own generators are
// — not NOT_FOUND "unknown generator", which says the generator does not
// exist, so that a client or a probe (/readyz?generator=NAME) takes it
// for good and is told nothing of the read. Once the read goes through,
// the generator is found.
func TestUndefinedNameBeforeDefinitionsReadNamesTheRead(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		quiet, store, clock := core.MemBubble()
		wall, _ := clock.Now()
		admin := store.Connect(clock)
		defer admin.Close()
		if err := admin.CreateDefinition(context.Background(), coordinator.GeneratorDefinition{Name: "msg", Definition: "snowflake", Created: wall}); err != nil {
			t.Fatal(err)
		}
		store.Faults().SetAvailability(memory.OpAdmin, memory.Refusing)
		layout, _ := generator.Preset("snowflake")
		cfg := core.DefaultConfig()
		cfg.Cluster = "unread"
		cfg.Generators = []core.GeneratorConfig{{Name: "default", Layout: layout}}
		nc := core.StartMemNode(t, cfg, store, clock, core.WithLogger(quiet))
		defer nc.Stop()
		time.Sleep(3 * time.Second) // the start's read and one more, both failed

		_, err := nc.NextID(context.Background(), "msg")
		var ns *core.NotServingError
		if errors.Is(err, core.ErrUnknownGenerator) || !errors.As(err, &ns) || ns.Code != clockguard.CodeStarting ||
			!strings.Contains(ns.Reason, "definitions") {
			t.Fatalf("NextID of a generator the coordinator defines, before the node could read the definitions: %v; want not serving, STARTING, naming the read", err)
		}
		if _, err := nc.Find("msg"); errors.Is(err, core.ErrUnknownGenerator) {
			t.Fatalf("Find (/readyz?generator=msg, Info) before the definitions were read: %v; want the read named", err)
		}

		store.Faults().Clear()
		time.Sleep(3 * time.Second)
		if _, err := nc.Find("msg"); err != nil {
			t.Fatalf("Find once the definitions were read: %v", err)
		}
		if _, err := nc.NextID(context.Background(), "nothere"); !errors.Is(err, core.ErrUnknownGenerator) {
			t.Fatalf("NextID of a name nothing defines, once the definitions were read: %v; want unknown generator", err)
		}
	})
}
