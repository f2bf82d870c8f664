package coordinator

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// Every refusal of a Timing is a *TimingError matching ErrInvalidSpec that
// calls the fields by the names given: a program reading them from flags
// gets refusals naming its flags.
func TestTimingNamedRefusals(t *testing.T) {
	flags := TimingNames{LeaseTTL: "--ttl", ReservationWindow: "--window", Timeout: "--timeout", RefreshInterval: "refresh"}
	for _, c := range []struct {
		name  string
		mod   func(*Timing)
		field string
		want  string
	}{
		{"ttl below 2s", func(t *Timing) { t.LeaseTTL = time.Second }, "--ttl", "1s must be whole seconds, at least 2s"},
		{"ttl not whole", func(t *Timing) { t.LeaseTTL = 2500 * time.Millisecond }, "--ttl", "whole seconds"},
		{"timeout zero", func(t *Timing) { t.Timeout = 0 }, "--timeout", "below the --ttl 5s"},
		{"timeout at the ttl", func(t *Timing) { t.Timeout = 5 * time.Second }, "--timeout", "below the --ttl 5s"},
		{"refresh zero", func(t *Timing) { t.RefreshInterval = 0 }, "refresh", "positive"},
		{"window zero", func(t *Timing) { t.ReservationWindow = 0 }, "--window", "positive"},
		{"window at the refresh", func(t *Timing) { t.ReservationWindow = time.Second }, "--window", "exceed the refresh 1s"},
		{"window short", func(t *Timing) { t.ReservationWindow = 3 * time.Second }, "--window", "2 × --timeout 1s + 1.5s = 3.5s"},
	} {
		tm := DefaultTiming()
		c.mod(&tm)
		err := tm.ValidateNamed(flags)
		var te *TimingError
		if !errors.As(err, &te) || !errors.Is(err, ErrInvalidSpec) {
			t.Fatalf("%s: %v, want a *TimingError matching ErrInvalidSpec", c.name, err)
		}
		if te.Field != c.field || !strings.Contains(te.Reason, c.want) {
			t.Errorf("%s: field %q reason %q, want %q and %q", c.name, te.Field, te.Reason, c.field, c.want)
		}
		if err := tm.Validate(); err == nil || strings.Contains(err.Error(), "--") {
			t.Errorf("%s: Validate %v, want a refusal in the default names", c.name, err)
		}
	}
}

// The session rule: the window rides out two thirds of the session
// timeout plus the slack; AllowShortWindow lifts it.
func TestTimingSession(t *testing.T) {
	tm := DefaultTiming()
	if err := tm.ValidateSession(5*time.Second, "session timeout", DefaultTimingNames); err != nil {
		t.Fatalf("5s window, 5s session: %v", err)
	}
	err := tm.ValidateSession(6*time.Second, "requested session timeout", DefaultTimingNames)
	if !errors.Is(err, ErrInvalidSpec) || !strings.Contains(err.Error(), "reservation window 5s is shorter than 2/3 of the requested session timeout 6s + 1.5s = 5.5s") {
		t.Fatalf("5s window, 6s session: %v", err)
	}
	tm.AllowShortWindow = true
	if err := tm.ValidateSession(6*time.Second, "session timeout", DefaultTimingNames); err != nil {
		t.Fatalf("with AllowShortWindow: %v", err)
	}
	if SessionStall(6*time.Second) != 4*time.Second {
		t.Fatalf("SessionStall(6s) = %v", SessionStall(6*time.Second))
	}
}
