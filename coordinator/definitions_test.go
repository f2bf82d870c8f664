package coordinator

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestDefinitionRecord(t *testing.T) {
	at := time.Date(2026, 12, 6, 2, 0, 0, 0, time.UTC)
	d := GeneratorDefinition{Name: "orders", Definition: "segment,start=1,max=9", Allow: []string{"shop"}, Created: at}
	back, err := DecodeDefinition("orders", "k", EncodeDefinition(d))
	if err != nil || back.Schema != DefinitionSchema || back.Definition != d.Definition || !back.Created.Equal(at) || back.IsRetired() {
		t.Fatalf("round trip: %+v, %v", back, err)
	}
	if strings.Contains(string(EncodeDefinition(d)), "retired") {
		t.Fatalf("a serving definition stores a retirement: %s", EncodeDefinition(d))
	}
	if !d.Allows("shop") || d.Allows("other") || d.Allows("") || !(GeneratorDefinition{}).Allows("anyone") {
		t.Fatal("Allows: want exactly the names listed, or everyone when none is")
	}
	r, changed := d.Retire("gone", at.Add(time.Hour))
	if r2, again := r.Retire("later", at.Add(2*time.Hour)); !changed || again || !r2.Retired.Equal(at.Add(time.Hour)) || r2.RetiredWhy != "gone" {
		t.Fatalf("Retire twice: %+v (%v, %v); want the first retirement kept", r2, changed, again)
	}

	for _, c := range []struct {
		name, rec string
		is        error
		want      string
	}{
		{"newer schema", `{"name":"orders","definition":"x","created":"2026-12-06T02:00:00Z","schema":2}`, ErrSchemaTooNew, `generator "orders": definition k has schema 2`},
		{"no schema", `{"name":"orders","definition":"x","created":"2026-12-06T02:00:00Z"}`, nil, "schema 0"},
		{"another name", `{"name":"users","definition":"x","created":"2026-12-06T02:00:00Z","schema":1}`, nil, `names generator "users"`},
		{"not JSON", `segment`, nil, "not readable"},
		{"no definition", `{"name":"orders","definition":"","created":"2026-12-06T02:00:00Z","schema":1}`, ErrInvalidSpec, "Definition"},
		{"allowed twice", `{"name":"orders","definition":"x","allow":["a","a"],"created":"2026-12-06T02:00:00Z","schema":1}`, ErrInvalidSpec, `names "a" twice`},
	} {
		_, err := DecodeDefinition("orders", "k", []byte(c.rec))
		if err == nil || (c.is != nil && !errors.Is(err, c.is)) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v; want an error naming %q", c.name, err, c.want)
		}
	}
}
