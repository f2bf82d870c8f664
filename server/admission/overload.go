package admission

import (
	"errors"
	"fmt"
	"time"
)

// ErrOverloaded is matched by every OverloadedError.
var ErrOverloaded = errors.New("overloaded")

// OverloadedError is a request shed by admission: the generator's queue
// is full, the caller's deadline falls before the request's turn, or the
// caller is past its --client-rate.
type OverloadedError struct {
	Generator string
	// Queued is the IDs asked for ahead of this request; Limit the queue
	// bound; Asked this request's count.
	Queued, Limit int64
	Asked         int
	// Deadline: shed for the caller's deadline, not the bound.
	Deadline bool
	// ClientRate and ClientBurst: shed for the caller's --client-rate
	// (IDs/s) with its burst, when ClientRate > 0.
	ClientRate  float64
	ClientBurst int64
	// RetryAfter is when the IDs ahead will have been produced, or the
	// caller's rate allows these.
	RetryAfter time.Duration
	// Detail, when set, says why in place of the queue's figures (a
	// segment generator's claim settling past the deadline).
	Detail string
	// Cause, when set, is a refusal of this call alone that no queue, rate
	// or deadline explains, in place of OVERLOADED: an ErrorReason name
	// (answered as that cause is, UNAVAILABLE for COORDINATOR_UNAVAILABLE).
	// A segment generator asked for more than it holds while its
	// counter's claims fail: it serves smaller calls, so its state serves,
	// and this call is refused with the cause, Have (the IDs the node
	// holds: the most a call gets now) and Detail (why claims fail).
	Cause string
	Have  int64
	// Held is how long the refusal was held back: the caller's flow was
	// refused faster than Refusals' pace.
	Held time.Duration
}

// Bound names what shed the request (ErrorInfo metadata "bound"); ""
// for a refusal with a Cause of its own.
func (e *OverloadedError) Bound() string {
	switch {
	case e.Cause != "":
		return ""
	case e.ClientRate > 0:
		return "client-rate"
	case e.Deadline:
		return "deadline"
	}
	return "max-queue"
}

func (e *OverloadedError) Error() string {
	msg := e.message()
	if e.Held > 0 {
		msg += fmt.Sprintf(" (answered %v late: this client is refused faster than a client honouring RetryInfo would be)", e.Held.Round(time.Millisecond))
	}
	return msg
}

func (e *OverloadedError) message() string {
	if e.Cause != "" && e.RetryAfter <= 0 { // no retry serves it (a definition used up)
		return fmt.Sprintf("generator %q cannot serve these %d IDs: %s; calls for at most %d are served",
			e.Generator, e.Asked, e.Detail, e.Have)
	}
	if e.Cause != "" {
		return fmt.Sprintf("generator %q cannot serve these %d IDs now: %s; calls for at most %d are served; retry in %v",
			e.Generator, e.Asked, e.Detail, e.Have, e.RetryAfter.Round(time.Millisecond))
	}
	if e.Detail != "" {
		return fmt.Sprintf("generator %q overloaded: %s; retry in %v", e.Generator, e.Detail, e.RetryAfter.Round(time.Millisecond))
	}
	if e.ClientRate > 0 {
		return fmt.Sprintf("generator %q overloaded: this client is past --client-rate %g IDs/s (burst %d) with these %d; retry in %v",
			e.Generator, e.ClientRate, e.ClientBurst, e.Asked, e.RetryAfter.Round(time.Millisecond))
	}
	if e.Deadline {
		return fmt.Sprintf("generator %q overloaded: %d IDs asked for ahead of these %d take longer than the call's deadline; retry in %v",
			e.Generator, e.Queued, e.Asked, e.RetryAfter.Round(time.Millisecond))
	}
	return fmt.Sprintf("generator %q overloaded: %d IDs asked for ahead of these %d, limit --max-queue %d; retry in %v",
		e.Generator, e.Queued, e.Asked, e.Limit, e.RetryAfter.Round(time.Millisecond))
}

func (e *OverloadedError) Is(target error) bool { return target == ErrOverloaded }
