package controller

// Refusals made as the core makes them, for the driver's own checks (the
// target's, a tree's).

import (
	"github.com/switchml/switchml-go/p4/controller/jobcore"
	"google.golang.org/grpc/codes"
)

// invalid and refuse make refusals as the core does: their gRPC code tells
// a client how to take them.
func invalid(format string, args ...any) error { return jobcore.Invalid(format, args...) }

func refuse(code codes.Code, format string, args ...any) error {
	return jobcore.Refuse(code, format, args...)
}
