package clockguard_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/firnid/firn/clockguard"
	"github.com/firnid/firn/internal/testing/ntptest"
)

func ExampleStepSize() {
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	// 20ms passed on the monotonic clock, but the wall clock reads 480ms
	// earlier: it was stepped back by 500ms.
	s := clockguard.StepSize(t0, 0, t0.Add(-480*time.Millisecond), 20*time.Millisecond)
	fmt.Println(s, clockguard.Step{Size: s})
	// Output: 500ms clock stepped back 500ms
}

func ExampleServingState() {
	st := clockguard.NewServingState("default")
	st.Subscribe(func(tr clockguard.Transition) {
		fmt.Printf("%s -> %s %q\n", tr.From, tr.To, tr.Reason)
	})
	_ = st.Check()
	_ = st.Ready()
	st.Set(clockguard.SourceClockRollback, "clock rolled back 3.2s, limit 1s")
	fmt.Println(st.Serving(), st.Reason())
	st.Clear(clockguard.SourceClockRollback)
	fmt.Println(st.Serving())
	// Output:
	// starting -> checking "checking"
	// checking -> serving ""
	// serving -> not-serving "clock rolled back 3.2s, limit 1s"
	// false clock rolled back 3.2s, limit 1s
	// not-serving -> serving ""
	// true
}

func ExampleNTPChecker_Check() {
	srv, err := ntptest.Start()
	if err != nil {
		fmt.Println(err)
		return
	}
	defer srv.Close()
	srv.SetOffset(-2 * time.Second) // the NTP server's time runs 2s behind

	c, err := clockguard.NewNTPChecker(clockguard.NewSystem(), clockguard.DefaultNTPConfig(srv.Addr()))
	if err != nil {
		fmt.Println(err)
		return
	}
	_, err = c.Check(context.Background())
	var oe *clockguard.OffsetError
	if errors.As(err, &oe) {
		fmt.Println("ahead by", oe.Offset.Round(100*time.Millisecond), "limit", oe.Limit)
	}
	// Output: ahead by 2s limit 250ms
}
