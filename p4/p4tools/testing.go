package p4tools

import "errors"

// TB is what ForTest needs of a test or benchmark; *testing.T and
// *testing.B have it. The package does not import testing, so that it stays
// out of the programs that use it.
type TB interface {
	Helper()
	Skipf(format string, args ...any)
	Fatal(args ...any)
}

// ForTest returns the prepared toolchain. It skips the test, saying why,
// only when the toolchain is absent; a toolchain that is there but cannot be
// prepared fails the test.
func ForTest(tb TB) *Tools {
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
