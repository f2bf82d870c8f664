package memory_test

import (
	"testing"
	"time"

	"github.com/firnid/firn/clockguard"
	"github.com/firnid/firn/coordinator"
	"github.com/firnid/firn/coordinator/memory"
)

// TestSnapshotCarriesDefinitions: a restore puts the definitions back as
// the snapshot has them: one created since is gone, one retired since
// serves again.
func TestSnapshotCarriesDefinitions(t *testing.T) {
	s := memory.New(memory.Config{})
	c := s.Connect(clockguard.NewSystem())
	defer c.Close()
	ctx := ctxFor(t, 10*time.Second)
	at := time.Date(2026, 12, 6, 2, 0, 0, 0, time.UTC)
	def := func(name string) coordinator.GeneratorDefinition {
		return coordinator.GeneratorDefinition{Name: name, Definition: "snowflake-ish", Created: at}
	}
	if err := c.CreateDefinition(ctx, def("a")); err != nil {
		t.Fatal(err)
	}
	snap := s.Snapshot()
	if err := c.CreateDefinition(ctx, def("b")); err != nil {
		t.Fatal(err)
	}
	if _, err := c.RetireDefinition(ctx, "a", "gone", at.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	s.Restore(snap)
	ds, err := c.Definitions(ctx)
	if err != nil || len(ds) != 1 || ds[0].Name != "a" || ds[0].IsRetired() {
		t.Fatalf("Definitions after the restore: %+v, %v; want a alone, serving", ds, err)
	}
}
