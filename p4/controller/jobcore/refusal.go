package jobcore

// How the core says no: refusals that carry the gRPC code a client acts on.

import (
	"errors"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Refusal is how the core says no: a message for the caller and the gRPC
// code that tells a client how to take it.
type Refusal struct {
	code codes.Code
	msg  string
}

func (r *Refusal) Error() string { return r.msg }

// GRPCStatus makes a refusal a gRPC error with its code.
func (r *Refusal) GRPCStatus() *status.Status { return status.New(r.code, r.msg) }

// Refuse makes a refusal with code.
func Refuse(code codes.Code, format string, args ...any) error {
	return &Refusal{code: code, msg: fmt.Sprintf(format, args...)}
}

// Invalid makes a refusal of a malformed request (InvalidArgument).
func Invalid(format string, args ...any) error {
	return Refuse(codes.InvalidArgument, format, args...)
}

// TooBig is the target's refusal (Config.Admit) of a job larger than the
// switch serves: a registration that may run over the ring is let through
// anyway, and its job goes there.
type TooBig struct{ *Refusal }

func (e *TooBig) Unwrap() error { return e.Refusal }

// CodeOf is the code of a Refusal (Unknown for any other error).
func CodeOf(err error) codes.Code {
	var r *Refusal
	switch {
	case err == nil:
		return codes.OK
	case errors.As(err, &r):
		return r.code
	}
	return codes.Unknown
}
