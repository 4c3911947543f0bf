package jobcore

// How the core says no: refusals that carry the gRPC code a client acts on.

import (
	"errors"

	"github.com/switchml/switchml-go/field"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Refusal is how the core says no: a message for the caller and the gRPC
// code that tells a client how to take it.
// Its message names the controller's settings as {Field} (see package
// field): by their Go names, or, through field.Named, as the operator's
// program names them.
type Refusal struct {
	code codes.Code
	msg  *field.Error
}

func (r *Refusal) Error() string { return r.msg.Error() }

// GRPCStatus makes a refusal a gRPC error with its code.
func (r *Refusal) GRPCStatus() *status.Status { return status.New(r.code, r.Error()) }

// Unwrap is the refusal's message, which names the settings (field.Named
// finds it there).
func (r *Refusal) Unwrap() error { return r.msg }

// Refuse makes a refusal with code; format may name the controller's
// settings as {Field}.
func Refuse(code codes.Code, format string, args ...any) error {
	return &Refusal{code: code, msg: field.Errorf(format, args...)}
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
