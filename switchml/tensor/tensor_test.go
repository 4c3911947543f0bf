package tensor

import (
	"context"
	"errors"
	"strings"
	"testing"

	"gorgonia.org/tensor"
)

// TestStartRefuses: what the switch cannot sum is refused before the
// session is touched, with an error that says what to do.
func TestStartRefuses(t *testing.T) {
	m := tensor.New(tensor.WithShape(2, 2), tensor.WithBacking([]float32{1, 2, 3, 4}))
	view, err := m.Slice(tensor.S(0, 1))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		t    *tensor.Dense
		want string
	}{
		{"nil", nil, "nil tensor"},
		{"view", view.(*tensor.Dense), "Materialize()"},
		{"scalar", tensor.New(tensor.FromScalar(float32(1))), "reshape it"},
		{"float64", tensor.New(tensor.WithShape(2), tensor.WithBacking([]float64{1, 2})), "use Float32 or Int32"},
	} {
		_, err := Start(context.Background(), nil, c.t)
		if !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want ErrUnsupported saying %q", c.name, err, c.want)
		}
	}
}
