package local

import (
	"context"
	"time"
)

// TB is what ForTest needs of a test or benchmark; *testing.T and
// *testing.B have it. The package does not import testing, so that it stays
// out of the programs that use it.
type TB interface {
	Helper()
	Fatalf(format string, args ...any)
	Errorf(format string, args ...any)
	Cleanup(func())
}

// ForTest starts an embedded switch and controller for a test or a
// benchmark, fails it if they do not come up within a minute, and closes
// them when it ends, reporting an error either hit while it ran.
func ForTest(tb TB, opts Options) *Fabric {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	fab, err := Start(ctx, opts)
	if err != nil {
		tb.Fatalf("starting the embedded switch and controller: %v", err)
	}
	tb.Cleanup(func() {
		if err := fab.Close(); err != nil {
			tb.Errorf("embedded switch and controller: %v", err)
		}
	})
	return fab
}
