package sim

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/firnid/firn/server/admission"
)

// TestRefusalNamingNoCause: a call of the default generator refused, at
// once, with an error the API maps to no ErrorInfo reason (an error of
// no known kind, a bare overload without its figures) is a refusal that
// does not say why, and a violation — as it is for the segment and the
// sequence generators (checkSegRefusal, the sequence checks).
func TestRefusalNamingNoCause(t *testing.T) {
	for _, err := range []error{
		errors.New("coordinator: read of the reservation failed: injected"),
		fmt.Errorf("%w: queue full", admission.ErrOverloaded),
	} {
		w := &world{start: time.Now()}
		n := &node{w: w, name: "n1"}
		n.checkRefusal(refusal{who: "n1/c1", what: "NextIDs(10)", err: err, took: time.Millisecond, bound: time.Second, up: true})
		if len(w.violations) == 0 {
			t.Errorf("refused with %q: no violation", err)
			continue
		}
		t.Logf("%s", strings.Join(w.violations, "\n"))
	}
}
