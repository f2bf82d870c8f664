package core

import (
	"errors"
	"fmt"
	"time"
	"unicode/utf8"

	"github.com/firnid/firn/clockguard"
)

// Errors a request is refused with before it reaches a generator's source.
var (
	// ErrUnknownGenerator: the request names a generator this node does
	// not run.
	ErrUnknownGenerator = errors.New("unknown generator")
	// ErrNotServing: the generator is not serving; the wrapping
	// NotServingError carries the reason.
	ErrNotServing = errors.New("not serving")
	// ErrBadRequest: a request field is out of bounds; the message names
	// the field and the bound.
	ErrBadRequest = errors.New("invalid argument")
)

// NotServingError says why a generator refuses: the human reason and the
// machine-readable cause (docs/design.md, Errors).
type NotServingError struct {
	Generator string
	Reason    string
	// Code, Limit, Measured: the cause, the bound and the value that broke
	// it (empty when the cause has none).
	Code            clockguard.Code
	Limit, Measured string
	// RetryAfter is when the generator expects to serve again, from the
	// refusal; 0 when the node cannot know.
	RetryAfter time.Duration
}

func (e *NotServingError) Error() string {
	return fmt.Sprintf("generator %q not serving: %s", e.Generator, e.Reason)
}

func (e *NotServingError) Is(target error) bool { return target == ErrNotServing }

// RequestError is a request field out of bounds.
type RequestError struct {
	Field, Value, Limit string
	Msg                 string
}

func (e *RequestError) Error() string { return ErrBadRequest.Error() + ": " + e.Msg }

func (e *RequestError) Is(target error) bool { return target == ErrBadRequest }

// BadField is a RequestError; the message names the field and the bound.
// The value, and every string among args, is cut to echoMax bytes (Echo):
// the caller's input comes back bounded.
func BadField(field, value, limit, format string, args ...any) error {
	for i, a := range args {
		if s, ok := a.(string); ok {
			args[i] = Echo(s)
		}
	}
	return &RequestError{Field: Echo(field), Value: Echo(value), Limit: limit, Msg: fmt.Sprintf(format, args...)}
}

// echoMax is the most bytes of a caller's input an error repeats.
const echoMax = 64

// Echo is s as an error may repeat it: at most echoMax bytes (cut on a
// rune boundary), followed by how long it was when cut.
func Echo(s string) string {
	if len(s) <= echoMax {
		return s
	}
	cut := echoMax
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return fmt.Sprintf("%s… (%d bytes)", s[:cut], len(s))
}

// ErrPermissionDenied: the caller is not on the generator's allow list.
var ErrPermissionDenied = errors.New("permission denied")

// PermissionError refuses a caller the generator's allow list does not
// name. It names the generator and nothing else: not the list, not the
// name the caller was seen as, not the generator's state.
type PermissionError struct {
	Generator string
}

func (e *PermissionError) Error() string {
	return fmt.Sprintf("%v: generator %q does not serve this caller", ErrPermissionDenied, e.Generator)
}

func (e *PermissionError) Is(target error) bool { return target == ErrPermissionDenied }

// UnknownGeneratorError names the generator asked for and those the node
// runs.
type UnknownGeneratorError struct {
	Name  string
	Known string // the node's generators, as a list for a person
	// Skipped says why this node does not run a generator the
	// coordinator defines ("" when none is defined by that name).
	Skipped string
}

func (e *UnknownGeneratorError) Error() string {
	if e.Skipped != "" {
		return fmt.Sprintf("%v %q on this node: the coordinator defines it, and this node cannot run it: %s (this node runs %s)",
			ErrUnknownGenerator, e.Name, e.Skipped, e.Known)
	}
	return fmt.Sprintf("%v %q (this node runs %s)", ErrUnknownGenerator, e.Name, e.Known)
}

func (e *UnknownGeneratorError) Is(target error) bool { return target == ErrUnknownGenerator }
