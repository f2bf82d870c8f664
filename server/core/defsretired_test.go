package core

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/firnid/firn/clockguard"
	"github.com/firnid/firn/coordinator"
)

// A running generator held because its stored record does not read (a
// newer schema, a hand-edited key) is retired meanwhile: when the record
// reads again, retired, the generator goes from held to draining. It must
// never say serving on the way — /readyz 200 and gRPC health SERVING
// (both follow the state's transitions) while every call is refused
// NOT_FOUND as retired: ready means it serves.
func TestRetiredWhileUnreadableNeverSaysServing(t *testing.T) {
	gc, err := ParseGeneratorDefinition("g", "snowflake")
	if err != nil {
		t.Fatal(err)
	}
	rt := &Generator{cfg: gc, state: clockguard.NewServingState("g")}
	c := &Core{log: slog.New(slog.DiscardHandler)}
	c.set.Store(&genSet{list: []*Generator{rt}, byName: map[string]*Generator{"g": rt}})
	// Started and serving, as a running generator is.
	_, stop := context.WithCancel(context.Background())
	rt.stopRun = stop
	if err := rt.state.Check(); err != nil {
		t.Fatal(err)
	}
	if err := rt.state.Ready(); err != nil || !rt.state.Serving() {
		t.Fatalf("state not serving: %v", err)
	}
	defs := &fakeDefs{err: &coordinator.UnreadableDefinitionsError{Records: []coordinator.UnreadableDefinition{
		{Name: "g", Where: "/firn/g/definition", Err: coordinator.ErrSchemaTooNew}}}}
	c.readDefinitions(context.Background(), defs)
	if rt.state.Serving() {
		t.Fatal("serving with its record unreadable")
	}

	var serving []string
	rt.state.Subscribe(func(tr clockguard.Transition) {
		if tr.To == clockguard.StateServing {
			_, err := c.Lookup("g")
			serving = append(serving, tr.From.String()+" -> serving, Lookup: "+errString(err))
		}
	})
	retired := coordinator.GeneratorDefinition{Name: "g", Definition: gc.Spec(), Created: time.Now(),
		Retired: time.Now(), RetiredWhy: "moved to g2"}
	defs.ds, defs.err = []coordinator.GeneratorDefinition{retired}, nil
	c.readDefinitions(context.Background(), defs)
	if len(serving) > 0 {
		t.Fatalf("the retired generator said serving (so /readyz 200, health SERVING) on its way to draining: %v", serving)
	}
	if st := rt.state.State(); st != clockguard.StateDraining {
		t.Fatalf("the retired generator is %s, want draining", st)
	}
	if _, err := c.Lookup("g"); err == nil {
		t.Fatal("Lookup served the retired generator")
	}
}
