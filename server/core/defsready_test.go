package core

import (
	"context"
	"testing"
	"time"

	"github.com/firnid/firn/clockguard"
	"github.com/firnid/firn/coordinator"
)

// fakeDefs answers Definitions with what next holds.
type fakeDefs struct {
	ds  []coordinator.GeneratorDefinition
	err error
}

func (f *fakeDefs) CreateDefinition(context.Context, coordinator.GeneratorDefinition) error {
	return nil
}
func (f *fakeDefs) RetireDefinition(context.Context, string, string, time.Time) (coordinator.GeneratorDefinition, error) {
	return coordinator.GeneratorDefinition{}, nil
}
func (f *fakeDefs) Definitions(context.Context) ([]coordinator.GeneratorDefinition, error) {
	return f.ds, f.err
}

// A running generator whose stored record turned unreadable is held; once
// the record reads again, the moment its state says serving (what /readyz
// and gRPC health report, from the same transition) its calls are served:
// Lookup must not still refuse with the unreadable record's reason.
func TestDefinitionReadableAgainServesWhenStateServes(t *testing.T) {
	gc, err := ParseGeneratorDefinition("g", "snowflake")
	if err != nil {
		t.Fatal(err)
	}
	rt := &Generator{cfg: gc, state: clockguard.NewServingState("g")}
	c := &Core{}
	c.set.Store(&genSet{list: []*Generator{rt}, byName: map[string]*Generator{"g": rt}})
	if err := rt.state.Check(); err != nil {
		t.Fatal(err)
	}
	if err := rt.state.Ready(); err != nil || !rt.state.Serving() {
		t.Fatalf("state not serving: %v", err)
	}
	stored := coordinator.GeneratorDefinition{Name: "g", Definition: gc.Spec(), Created: time.Now()}
	defs := &fakeDefs{err: &coordinator.UnreadableDefinitionsError{Records: []coordinator.UnreadableDefinition{
		{Name: "g", Where: "/firn/g/definition", Err: coordinator.ErrSchemaTooNew}}}}
	c.readDefinitions(context.Background(), defs)
	if rt.state.Serving() {
		t.Fatal("serving with its record unreadable")
	}
	if _, err := c.Lookup("g"); err == nil {
		t.Fatal("Lookup served with its record unreadable")
	}

	var atServing []error
	rt.state.Subscribe(func(tr clockguard.Transition) {
		if tr.To == clockguard.StateServing && tr.From != clockguard.StateServing {
			_, err := c.Lookup("g")
			atServing = append(atServing, err)
		}
	})
	defs.ds, defs.err = []coordinator.GeneratorDefinition{stored}, nil
	c.readDefinitions(context.Background(), defs)
	if !rt.state.Serving() {
		t.Fatalf("not serving once its record reads again: %s", rt.state.Reason())
	}
	if len(atServing) != 1 {
		t.Fatalf("%d transitions to serving, want 1", len(atServing))
	}
	if atServing[0] != nil {
		t.Fatalf("the state said serving (so /readyz 200, health SERVING) while Lookup refused: %v", atServing[0])
	}
	if _, err := c.Lookup("g"); err != nil {
		t.Fatalf("Lookup after the read: %v", err)
	}
}
