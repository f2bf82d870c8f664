// Package generator owns firn's bit layouts and the snowflake core: Layout
// (presets, validation, the canonical string), Encode/Decode, and Generator,
// which issues IDs for one worker lease.
//
// It imports only the standard library and never reads the wall clock: the
// clock is injected (Clock), and the core function takes the clock reading
// as an argument.
//
// # Invariants
//
// A Generator serves one lease for life. With L its logical time (the time
// field of the last ID issued):
//
//   - L = max(L_prev, now, Floor+1): L never decreases, and no ID has a time
//     at or below Floor (the previous holder's reservation);
//   - no ID has a time above the reservation bound (Reserved, raised from
//     outside with SetReserved as the coordinator confirms reservations);
//   - within one L the sequence numbers are distinct and increasing, so the
//     IDs of one generator strictly increase;
//   - L runs ahead of the clock ("borrowing", on sequence exhaustion) by at
//     most MaxLead; there the generator waits.
//
// Together with the coordinator's fences these make every ID unique within
// one (coordinator, cluster, generator), whatever any clock does.
//
// # Clock steps
//
// Between two reads the step size is s = monotonic delta − wall delta. A
// backward step s <= MaxLead is absorbed: calls wait while L − now >
// MaxLead (a delay of at most s) and none fails. A backward step s > MaxLead
// fails closed: calls return *RollbackError{Step, Limit} until L − now <=
// MaxLead again. Forward steps are followed (L jumps with the clock), except
// that with MaxForwardStep set a forward step beyond it (measured from the
// largest wall − monotonic offset adopted so far) fails with
// *ForwardStepError until ConfirmClock: no ID carries a stepped time nobody
// confirmed, and the clock coming back ends the refusal by itself. The
// baseline of these measures is taken at New, so a step before the first
// call is seen too. A clock outside the layout's range fails with
// *RangeError; nothing is ever issued past the layout's last time.
//
// # Waits
//
// A call waits only for the clock (at the lead limit) or the reservation
// (SetReserved). Every wait watches a wake-up channel taken before the
// clock reading it was sized from; SetReserved, Retire and Wake close it,
// and the call reads the clock again and decides anew. No single wait
// lasts longer than 50 ms without a fresh reading either, so a wait sized
// from a clock since corrected ends within that even if nobody calls Wake.
//
// # Wide generators
//
// Wide (wide.go) issues the IDs of several Generators of one layout — the
// workers one node holds for one generator name — as one source, in the
// layout's own bit order within each time unit, so that its IDs strictly
// increase at up to k times one worker's rate. Each member stays a
// Generator of its own lease: every ID Wide hands out passed that
// member's checks (fillAt applies the same clock-step rule, checkStep, as
// fill), and Wide only chooses the unit and the member.
//
// # Hazards
//
// Encoding never masks: a value too wide for its field is an error, never
// silently truncated into someone else's ID space. An ID that sets bits above
// the layout (the sign bit included) is refused by Decode. Waits honour the
// caller's context; a clock wait that would outlast its deadline returns
// ErrAhead at once. Reserved -1 means nothing is reserved yet: no ID is
// issued before the first SetReserved.
package generator
