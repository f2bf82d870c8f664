package sim

import (
	"strings"
	"sync"
	"testing"
	"testing/synctest"
)

// A stall's report lists first the goroutines of a bubble that are not
// durably blocked (a stall's cause): here one waiting on a mutex, which
// stops the bubble's virtual time as a deadlock would.
func TestStallStacksSuspectsFirst(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		mu.Lock()
		go func() { // blocked on the mutex: not durable
			mu.Lock()
			mu.Unlock()
		}()
		var out string
		for i := 0; i < 1000; i++ {
			out = stallStacks(1 << 22)
			if strings.Contains(out, "sync.(*Mutex).Lock") {
				break
			}
		}
		mu.Unlock()
		suspects, _, _ := strings.Cut(out, "the others:")
		if !strings.Contains(suspects, "sync.(*Mutex).Lock") {
			t.Fatalf("the goroutine waiting on the mutex is not among the suspects:\n%.3000s", out)
		}
	})
}
