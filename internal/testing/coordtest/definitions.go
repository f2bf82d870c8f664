package coordtest

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/firnid/firn/coordinator"
)

// Definitions: generators defined at runtime are stored create-if-absent
// (a second create returns the standing one, from any client), listed
// sorted by name with the retired ones, retired idempotently (the first
// retirement's time and reason stay), an unknown name is ErrNoDefinition,
// and a record that does not read (a newer schema, not JSON) is left out
// of the list and named, with its key and why, beside the others: it
// affects its own generator alone.
func Definitions(t *testing.T, b Backend) {
	cl := b.NewCluster(t)
	c1, c2 := cl.Connect(t, sysClock), cl.Connect(t, sysClock)
	ctx := ctxT(t, 30*time.Second)
	created := time.Date(2026, 12, 6, 1, 0, 0, 0, time.UTC)
	orders := coordinator.GeneratorDefinition{Name: "orders", Definition: layoutA, Allow: []string{"billing", "shop"},
		Above: "123456789", Created: created}
	users := coordinator.GeneratorDefinition{Name: "users", Definition: "segment,start=1000,max=9223372036854775807", Created: created}
	legacy := coordinator.GeneratorDefinition{Name: "legacy", Definition: layoutB, Created: created}

	if ds, err := c1.Definitions(ctx); err != nil || len(ds) != 0 {
		t.Fatalf("Definitions of an empty cluster: %v, %v; want none", ds, err)
	}
	for _, d := range []coordinator.GeneratorDefinition{users, orders, legacy} {
		if err := c1.CreateDefinition(ctx, d); err != nil {
			t.Fatalf("CreateDefinition(%s): %v", d.Name, err)
		}
	}
	// Again, from another client, with another definition: the standing
	// one is returned and kept.
	again := orders
	again.Definition, again.Allow = layoutB, nil
	err := c2.CreateDefinition(ctx, again)
	var ex *coordinator.DefinitionExistsError
	if !errors.Is(err, coordinator.ErrDefinitionExists) || !errors.As(err, &ex) {
		t.Fatalf("CreateDefinition of a defined name: %v, want a *DefinitionExistsError", err)
	}
	want := orders
	want.Schema = coordinator.DefinitionSchema
	if !reflect.DeepEqual(ex.Existing, want) {
		t.Fatalf("the standing definition returned is %+v, want %+v", ex.Existing, want)
	}
	if bad := (coordinator.GeneratorDefinition{Name: "x", Definition: layoutA, Created: created, Allow: []string{"a", "a"}}); !errors.Is(c1.CreateDefinition(ctx, bad), coordinator.ErrInvalidSpec) {
		t.Fatal("CreateDefinition with a name allowed twice was not refused")
	}

	ds, err := c2.Definitions(ctx)
	if err != nil {
		t.Fatalf("Definitions: %v", err)
	}
	var names []string
	for _, d := range ds {
		names = append(names, d.Name)
		if d.Schema != coordinator.DefinitionSchema || d.IsRetired() {
			t.Fatalf("listed %+v: want schema %d, serving", d, coordinator.DefinitionSchema)
		}
	}
	if got := strings.Join(names, ","); got != "legacy,orders,users" {
		t.Fatalf("Definitions lists %s, want legacy,orders,users (sorted, the bad one absent)", got)
	}
	if !reflect.DeepEqual(ds[1], want) {
		t.Fatalf("listed %+v, want %+v", ds[1], want)
	}

	first := created.Add(time.Hour)
	r, err := c1.RetireDefinition(ctx, "orders", "moved to orders2", first)
	if err != nil || !r.Retired.Equal(first) || r.RetiredWhy != "moved to orders2" || r.Definition != layoutA {
		t.Fatalf("RetireDefinition: %+v, %v; want retired at %v for its reason", r, err, first)
	}
	r, err = c2.RetireDefinition(ctx, "orders", "again", first.Add(time.Hour))
	if err != nil || !r.Retired.Equal(first) || r.RetiredWhy != "moved to orders2" {
		t.Fatalf("RetireDefinition again: %+v, %v; want the first retirement kept (%v)", r, err, first)
	}
	if _, err := c1.RetireDefinition(ctx, "nosuch", "x", first); !errors.Is(err, coordinator.ErrNoDefinition) {
		t.Fatalf("RetireDefinition of an unknown name: %v, want ErrNoDefinition", err)
	}
	if err := c1.CreateDefinition(ctx, orders); !errors.As(err, &ex) || !ex.Existing.Retired.Equal(first) {
		t.Fatalf("CreateDefinition of a retired name: %v, want ErrDefinitionExists carrying the retired one", err)
	}
	ds, err = c1.Definitions(ctx)
	if err != nil || len(ds) != 3 || ds[1].Name != "orders" || !ds[1].Retired.Equal(first) || ds[0].IsRetired() || ds[2].IsRetired() {
		t.Fatalf("Definitions after the retirement: %+v, %v; want orders retired at %v among the three", ds, err, first)
	}
	// A definition shares nothing with the generator's other state: no
	// pin, floor or marker is listed for it.
	if gs, err := c1.Generators(ctx); err != nil || len(gs) != 0 {
		t.Fatalf("Generators after definitions alone: %+v, %v; want none", gs, err)
	}

	// What `firn generator create --above` does before it stores a
	// definition: a bump by one unit of a generator nothing has used
	// writes its floor alone, and every acquisition then starts above it.
	res, err := c1.Bump(ctx, coordinator.BumpSpec{Generator: "legacy", By: 1, Now: 41_999, MaxTime: bigFloor})
	if err != nil || res.Floor != 42_000 {
		t.Fatalf("Bump of an unused generator: %+v, %v; want the floor 42000", res, err)
	}
	if hs, err := c1.Workers(ctx, "legacy"); err != nil || len(hs) != 0 {
		t.Fatalf("Workers after a floor alone: %+v, %v; want none", hs, err)
	}
	spec := Spec("legacy", 4)
	spec.Layout = layoutB
	if l := mustAcquire(t, c2, spec, Node("n1")); l.Floor() < 42_000 || l.GeneratorFloor() != 42_000 {
		t.Fatalf("acquisition after the floor: Floor %d, GeneratorFloor %d; want at least 42000", l.Floor(), l.GeneratorFloor())
	}

	// A record written by a newer binary, and one that is not JSON: each
	// is left out and named (generator, where, why), and the others read.
	cl.SetDefinitionRecord(t, "users", []byte(`{"name":"users","definition":"segment","created":"2026-12-06T01:00:00Z","schema":99,"quota":7}`))
	cl.SetDefinitionRecord(t, "orders", []byte(`{"name":"orders",`))
	ds, err = c2.Definitions(ctx)
	if !errors.Is(err, coordinator.ErrSchemaTooNew) || !strings.Contains(err.Error(), `"users"`) || !strings.Contains(err.Error(), "99") {
		t.Fatalf("Definitions with a schema-99 record: %v, want ErrSchemaTooNew naming users and 99", err)
	}
	readable, bad, err := coordinator.SplitDefinitions(ds, err)
	if err != nil || len(readable) != 1 || readable[0].Name != "legacy" || len(bad) != 2 {
		t.Fatalf("Definitions with two unreadable records: %+v, unreadable %+v, %v; want legacy read, orders and users named", readable, bad, err)
	}
	for i, want := range []string{"orders", "users"} {
		if r := bad[i]; r.Name != want || !strings.Contains(r.Where, want) || !strings.Contains(r.Where, "definition") ||
			r.Err == nil || !strings.Contains(r.Err.Error(), `"`+want+`"`) {
			t.Fatalf("unreadable record %d: %+v, want generator %s, its key and why", i, r, want)
		}
	}
	if _, err := c1.RetireDefinition(ctx, "users", "x", first); !errors.Is(err, coordinator.ErrSchemaTooNew) {
		t.Fatalf("RetireDefinition of a schema-99 record: %v, want ErrSchemaTooNew", err)
	}
}
