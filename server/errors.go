package server

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/firnid/firn/generator"
	"github.com/firnid/firn/ringbuffer"
)

// Errors the handlers return before they reach a generator.
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

// NotServingError says why a generator refuses.
type NotServingError struct {
	Generator string
	Reason    string
}

func (e *NotServingError) Error() string {
	return fmt.Sprintf("generator %q not serving: %s", e.Generator, e.Reason)
}

func (e *NotServingError) Is(target error) bool { return target == ErrNotServing }

func badRequest(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrBadRequest, fmt.Sprintf(format, args...))
}

// code maps an error to its gRPC code: the one table of the node. HTTP
// status codes derive from it (httpStatus).
func code(err error) codes.Code {
	switch {
	case err == nil:
		return codes.OK
	case errors.Is(err, ErrBadRequest):
		return codes.InvalidArgument
	case errors.Is(err, ErrUnknownGenerator):
		return codes.NotFound
	case errors.Is(err, ErrNotServing),
		errors.Is(err, generator.ErrRollback),
		errors.Is(err, generator.ErrClockRange),
		errors.Is(err, generator.ErrReservation),
		errors.Is(err, generator.ErrAhead),
		errors.Is(err, generator.ErrForwardStep),
		errors.Is(err, generator.ErrRetired),
		errors.Is(err, ringbuffer.ErrNoSource),
		errors.Is(err, ringbuffer.ErrClosed):
		return codes.Unavailable
	case errors.Is(err, context.DeadlineExceeded):
		return codes.DeadlineExceeded
	case errors.Is(err, context.Canceled):
		return codes.Canceled
	}
	return codes.Internal
}

// grpcError turns an error into a gRPC status error.
func grpcError(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok && code(err) == codes.Internal {
		return err
	}
	return status.Error(code(err), err.Error())
}

// httpStatus maps a gRPC code to an HTTP status.
func httpStatus(c codes.Code) int {
	switch c {
	case codes.OK:
		return 200
	case codes.InvalidArgument:
		return 400
	case codes.NotFound:
		return 404
	case codes.Unavailable:
		return 503
	case codes.DeadlineExceeded:
		return 504
	case codes.Canceled:
		return 499
	case codes.ResourceExhausted:
		return 413
	}
	return 500
}
