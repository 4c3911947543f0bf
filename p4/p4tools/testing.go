package p4tools

import (
	"errors"
	"testing"
)

// ForTest returns the prepared toolchain. It skips the test, saying why,
// only when the toolchain is absent; a toolchain that is there but cannot be
// prepared fails the test.
func ForTest(tb testing.TB) *Tools {
	tb.Helper()
	t, err := Prepare()
	if errors.Is(err, ErrAbsent) {
		tb.Skipf("skipped: %v", err)
	}
	if err != nil {
		tb.Fatal(err)
	}
	return t
}
