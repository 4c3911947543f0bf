//go:build !switchml

package main

import (
	"context"
	"errors"
)

func startLocalFabric(context.Context) (string, func(), error) {
	return "", nil, errors.New("no in-process switch in this build (package switchml/local is not available yet): run a switch and controller and pass --controller")
}
