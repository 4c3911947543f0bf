// Package tensor sums gorgonia dense tensors (gorgonia.org/tensor) across
// the ranks of a switchml.Session: the tensor's backing array is summed in
// place, whatever its shape. It is apart from package switchml so that a
// program that sums plain slices does not depend on gorgonia.
//
// Import it beside gorgonia's package under another name:
//
//	import (
//		"gorgonia.org/tensor"
//		swtensor "github.com/switchml/switchml-go/switchml/tensor"
//	)
package tensor

import (
	"context"
	"errors"
	"fmt"

	"gorgonia.org/tensor"

	"github.com/switchml/switchml-go/switchml"
)

// ErrUnsupported is wrapped by the error for a tensor the switch cannot
// sum: nil, a view, a scalar, or a dtype other than float32 and int32.
var ErrUnsupported = errors.New("switchml/tensor: tensor not supported")

// Start begins an in-place sum of a dense float32 or int32 tensor across
// the session's ranks (switchml.Session.StartFloat32 and StartInt32).
func Start(ctx context.Context, s *switchml.Session, t *tensor.Dense) (*switchml.Handle, error) {
	if t == nil {
		return nil, fmt.Errorf("%w: nil tensor", ErrUnsupported)
	}
	if t.IsView() {
		return nil, fmt.Errorf("%w: the tensor is a view: call Materialize() and reduce the copy", ErrUnsupported)
	}
	switch d := t.Data().(type) {
	case []float32:
		return s.StartFloat32(ctx, d), nil
	case []int32:
		return s.StartInt32(ctx, d), nil
	case float32, int32:
		return nil, fmt.Errorf("%w: a scalar tensor: reshape it to a vector of one element", ErrUnsupported)
	}
	return nil, fmt.Errorf("%w: dtype %v: use Float32 or Int32", ErrUnsupported, t.Dtype())
}

// AllReduce sums a dense float32 or int32 tensor across the session's
// ranks in place.
func AllReduce(ctx context.Context, s *switchml.Session, t *tensor.Dense) error {
	h, err := Start(ctx, s, t)
	if err != nil {
		return err
	}
	return h.Wait(context.Background())
}
