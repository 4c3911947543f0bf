package local

import (
	"context"
	"testing"
	"time"
)

// ForTest starts an embedded switch and controller for a test or a
// benchmark, fails it if they do not come up within a minute, and closes
// them when it ends, reporting an error either hit while it ran.
func ForTest(tb testing.TB, opts Options) *Fabric {
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
