//go:build !switchml

package main

import (
	"context"
	"errors"
)

func startLocalFabric(context.Context) (string, func(), error) {
	return "", nil, errors.New("this build has no in-process switch; pass --controller or build with -tags switchml")
}
