package segment

import (
	"errors"
	"strings"
	"testing"
)

func TestParseDefinition(t *testing.T) {
	for _, c := range []struct {
		in   string
		want Definition
	}{
		{"segment", Definition{Start: 1, Max: MaxID}},
		{" segment ", Definition{Start: 1, Max: MaxID}},
		{"segment,start=1000000", Definition{Start: 1_000_000, Max: MaxID}},
		{"segment,max=9007199254740991", Definition{Start: 1, Max: JSMaxID}},
		{"segment, max=100 ,start=99", Definition{Start: 99, Max: 100}},
		{"segment,start=9223372036854775806", Definition{Start: MaxID - 1, Max: MaxID}},
	} {
		got, err := ParseDefinition(c.in)
		if err != nil || got != c.want {
			t.Errorf("ParseDefinition(%q) = %+v, %v; want %+v", c.in, got, err, c.want)
			continue
		}
		// The canonical form reads back as the same definition, and is
		// the same string whatever form it was given in.
		back, err := ParseDefinition(got.String())
		if err != nil || back != got || back.String() != got.String() {
			t.Errorf("%q: canonical %q reads back as %+v, %v", c.in, got.String(), back, err)
		}
	}
	if s := Default().String(); s != "segment,start=1,max=9223372036854775807" {
		t.Errorf("canonical default %q", s)
	}
}

// Every refusal names the field and the bound, and is ErrDefinition.
func TestParseDefinitionRefusals(t *testing.T) {
	for _, c := range []struct {
		in, field string
		parts     []string
	}{
		{"snowflake", "kind", []string{`"snowflake"`, `"segment"`}},
		{"segments", "kind", nil},
		{"segment,", "segment", []string{"key=value"}},
		{"segment,start", "segment", []string{"key=value"}},
		{"segment,start=0", "start", []string{"[1, 9223372036854775807)"}},
		{"segment,start=-5", "start", []string{`"-5"`}},
		{"segment,start=1e6", "start", []string{`"1e6"`}},
		{"segment,start=9223372036854775807", "start", []string{"[1, 9223372036854775807)"}},
		{"segment,max=1", "max", []string{"[2, 9223372036854775807]"}},
		{"segment,max=18446744073709551615", "max", []string{"[2, 9223372036854775807]"}},
		{"segment,max=99999999999999999999999", "max", nil},
		{"segment,start=10,max=10", "start", []string{"10 is not below max 10"}},
		{"segment,start=11,max=10", "start", []string{"not below max 10"}},
		{"segment,start=1,start=2", "start", []string{"given twice"}},
		{"segment,step=100", "step", []string{"unknown parameter", "start=N and max=M"}},
	} {
		_, err := ParseDefinition(c.in)
		var de *DefinitionError
		if !errors.As(err, &de) || !errors.Is(err, ErrDefinition) || de.Field != c.field {
			t.Errorf("ParseDefinition(%q): %v; want a refusal of field %q", c.in, err, c.field)
			continue
		}
		for _, p := range c.parts {
			if !strings.Contains(err.Error(), p) {
				t.Errorf("ParseDefinition(%q): %q does not name %s", c.in, err, p)
			}
		}
	}
}

func TestValidate(t *testing.T) {
	for _, d := range []Definition{{Start: 0, Max: 10}, {Start: 5, Max: 5}, {Start: 1, Max: MaxID + 1}, {}} {
		if err := d.Validate(); !errors.Is(err, ErrDefinition) {
			t.Errorf("Validate(%+v) = %v, want ErrDefinition", d, err)
		}
	}
	if err := Default().Validate(); err != nil {
		t.Errorf("Validate(Default()) = %v", err)
	}
	if n := (Definition{Start: 1, Max: 100}).Size(); n != 100 {
		t.Errorf("Size of [1, 100] = %d", n)
	}
}

func TestIsDefinition(t *testing.T) {
	for in, want := range map[string]bool{
		"segment": true, " segment,max=5": true, "segment,": true,
		"segments": false, "snowflake": false, "time=41,worker=10,seq=12": false, "": false,
	} {
		if got := IsDefinition(in); got != want {
			t.Errorf("IsDefinition(%q) = %v, want %v", in, got, want)
		}
	}
}

// A definition read from anywhere (a flag, a pin in the coordinator)
// either is refused as ErrDefinition or has valid bounds and a canonical
// form that reads back as itself.
func FuzzParseDefinition(f *testing.F) {
	for _, s := range []string{"segment", "segment,start=5", "segment,max=9007199254740991",
		"segment,start=3,max=4", "segment,start=0", "segment,max=x", "segment,,", "segment,start=1,start=1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, err := ParseDefinition(s)
		if err != nil {
			if !errors.Is(err, ErrDefinition) {
				t.Fatalf("ParseDefinition(%q): %v is not ErrDefinition", s, err)
			}
			return
		}
		if d.Validate() != nil || d.Start < 1 || d.Start >= d.Max || d.Max > MaxID {
			t.Fatalf("ParseDefinition(%q) = %+v: out of bounds", s, d)
		}
		back, err := ParseDefinition(d.String())
		if err != nil || back != d {
			t.Fatalf("%q: canonical %q reads back as %+v, %v", s, d.String(), back, err)
		}
		if !IsDefinition(s) {
			t.Fatalf("%q parsed but IsDefinition says no", s)
		}
	})
}
