package core

import (
	"context"
	"crypto/tls"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/firnid/firn/clockguard"
	"github.com/firnid/firn/coordinator"
)

// A generator whose stored definition serves named callers only is
// checked for the caller before anything else of the call
// (docs/design.md, Interfaces: "a refused caller learns the generator's
// name and nothing else", PERMISSION_DENIED) — also once it is retired,
// and while its record does not read (its list kept): a caller the list
// does not name must not be told the retirement and its reason, or the
// record's trouble, nor slip past the list while the record is unread.
func TestAllowListCheckedFirstWhenRetiredOrUnreadable(t *testing.T) {
	gc, err := ParseGeneratorDefinition("g", "snowflake")
	if err != nil {
		t.Fatal(err)
	}
	rt := &Generator{cfg: gc, state: clockguard.NewServingState("g")}
	c := &Core{log: slog.New(slog.DiscardHandler),
		cfg: Config{TLS: &tls.Config{ClientAuth: tls.RequireAndVerifyClientCert}}}
	c.set.Store(&genSet{list: []*Generator{rt}, byName: map[string]*Generator{"g": rt}})
	_, stop := context.WithCancel(context.Background())
	rt.stopRun = stop
	if err := rt.state.Check(); err != nil {
		t.Fatal(err)
	}
	if err := rt.state.Ready(); err != nil {
		t.Fatal(err)
	}
	stranger := context.Background() // no client certificate names it
	def := coordinator.GeneratorDefinition{Name: "g", Definition: gc.Spec(), Created: time.Now(), Allow: []string{"alice"}}
	defs := &fakeDefs{ds: []coordinator.GeneratorDefinition{def}}
	c.readDefinitions(context.Background(), defs)
	if err := c.Authorize(stranger, "g"); !errors.Is(err, ErrPermissionDenied) {
		t.Fatalf("a caller the stored list does not name: %v, want PERMISSION_DENIED", err)
	}

	// The record turns unreadable: its list is kept.
	defs.ds, defs.err = nil, &coordinator.UnreadableDefinitionsError{Records: []coordinator.UnreadableDefinition{
		{Name: "g", Where: "/firn/g/definition", Err: coordinator.ErrSchemaTooNew}}}
	c.readDefinitions(context.Background(), defs)
	if err := c.Authorize(stranger, "g"); !errors.Is(err, ErrPermissionDenied) {
		t.Fatalf("a caller the kept list does not name, the record unreadable: %v, want PERMISSION_DENIED", err)
	}

	// Retired, for a secret reason.
	def.Retired, def.RetiredWhy = time.Now(), "moved to project-x"
	defs.ds, defs.err = []coordinator.GeneratorDefinition{def}, nil
	c.readDefinitions(context.Background(), defs)
	if err := c.Authorize(stranger, "g"); !errors.Is(err, ErrPermissionDenied) {
		t.Fatalf("a caller the list does not name, the generator retired: %v, want PERMISSION_DENIED (nothing of the retirement)", err)
	}
}
