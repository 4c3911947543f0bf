//go:build !switchml

package collective

import (
	"context"
	"errors"
)

// SwitchMLAvailable tells whether this build carries the switchml backend.
const SwitchMLAvailable = false

func dialSwitchML(context.Context, Config) (Backend, error) {
	return nil, errors.New("collective: this build has no switchml backend (build with -tags switchml)")
}
