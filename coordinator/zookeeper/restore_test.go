package zookeeper_test

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/firnid/firn/coordinator"
	"github.com/firnid/firn/coordinator/zookeeper"
	"github.com/firnid/firn/internal/testing/coordtest"
)

// TestMarkerCheckedInMulti: a restore marker written between an
// acquisition's read of the reservation and its multi still refuses it:
// the multi creates and deletes the marker's path, which fails while the
// marker exists.
func TestMarkerCheckedInMulti(t *testing.T) {
	cl := newCluster(t, standalone(t))
	c := cl.ConnectWith(t, sysClock, nil)
	other := cl.Connect(t, sysClock)
	spec := coordtest.Spec("gen", 4)
	l := acquire(t, c, spec, coordtest.Node("first")) // pins the generator
	ev := coordinator.RestoreEvidence{Generator: "gen", Slot: l.Slot(), Acked: 500, Shown: 200,
		At: time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC), Node: coordtest.Node("noticer")}
	var once sync.Once
	var markErr error
	zookeeper.SetAfterRead(c, func(coordinator.Slot) {
		once.Do(func() { markErr = other.MarkRestored(ctxT(t, 10*time.Second), ev) })
	})
	_, err := c.Acquire(ctxT(t, 20*time.Second), spec, coordtest.Node("racer"))
	if markErr != nil {
		t.Fatal(markErr)
	}
	var re *coordinator.RestoredError
	if !errors.As(err, &re) || re.Evidence != ev {
		t.Fatalf("acquisition whose multi followed the marker's write: %v, want *RestoredError with the evidence", err)
	}
	hs, _ := c.Workers(ctxT(t, 10*time.Second), "gen")
	live := 0
	for _, h := range hs {
		if h.Live {
			live++
		}
	}
	if live != 1 {
		t.Fatalf("%d workers in use after the refused acquisition, want 1: %+v", live, hs)
	}
}

// TestNumbersNotCanonicalRefused: a reservation node holding anything but
// a decimal number in the canonical encoding, hand-written under a live
// holder, is never taken for a number: Reserve and Release refuse it
// naming the path (Release no longer writes over it), and neither reports
// success while the node holds less than asked.
func TestNumbersNotCanonicalRefused(t *testing.T) {
	cl := newCluster(t, standalone(t))
	c := cl.Connect(t, sysClock)
	for i, bad := range []string{"abc", "", "4.2e1", "+42", " 42", "0042"} {
		spec := coordtest.Spec(fmt.Sprintf("num%d", i), 1)
		n := coordtest.Node("holder")
		l := acquire(t, c, spec, n)
		reserve(t, l, 100, n)
		path := fmt.Sprintf("%s/%s/reserved/%d-%d", cl.Base(), spec.Generator, l.Slot().Datacenter, l.Slot().Worker)
		if _, err := cl.Admin().Set(path, []byte(bad), -1); err != nil {
			t.Fatal(err)
		}
		err := l.Reserve(ctxT(t, 10*time.Second), 200, beat(n))
		if err == nil || errors.Is(err, coordinator.ErrRolledBack) || !strings.Contains(err.Error(), path) {
			d, _, _ := cl.Admin().Get(path)
			t.Fatalf("hand-written %q: Reserve(200) = %v with %s holding %q; want a refusal naming the path", bad, err, path, d)
		}
		err = l.Release(ctxT(t, 10*time.Second), 100)
		if err == nil || !strings.Contains(err.Error(), path) {
			d, _, _ := cl.Admin().Get(path)
			t.Fatalf("hand-written %q: Release = %v with %s holding %q; want a refusal naming the path", bad, err, path, d)
		}
		if d, _, _ := cl.Admin().Get(path); string(d) != bad {
			t.Fatalf("hand-written %q was overwritten with %q", bad, d)
		}
		_, err = c.Bump(ctxT(t, 10*time.Second), coordinator.BumpSpec{Generator: spec.Generator, By: 10, MaxTime: 1 << 50})
		if err == nil || !strings.Contains(err.Error(), path) {
			t.Fatalf("hand-written %q: Bump = %v, want a refusal naming the path", bad, err)
		}
	}
}
