package main

import (
	"context"

	"github.com/switchml/switchml-go/p4/local"
)

// startLocalFabric runs a software switch and controller in this process
// for the workers to join.
func startLocalFabric(ctx context.Context) (string, func(), error) {
	fab, err := local.Start(ctx, local.Options{})
	if err != nil {
		return "", nil, err
	}
	return fab.ControllerAddr(), func() { fab.Close() }, nil
}
