package p4tools

import (
	"errors"
	"flag"
)

// TB is what ForTest needs of a test or benchmark; *testing.T and
// *testing.B have it. The package does not import testing, so that it stays
// out of the programs that use it.
type TB interface {
	Helper()
	Skipf(format string, args ...any)
	Fatal(args ...any)
}

// ForTest returns the prepared toolchain. It skips the test, saying why,
// when the toolchain is absent or the tests run with -short (the compilers
// and BMv2 take minutes: the full suite runs them); a toolchain that is
// there but cannot be prepared fails the test.
func ForTest(tb TB) *Tools {
	tb.Helper()
	if short() {
		tb.Skipf("skipped with -short: runs the P4 toolchain (p4c, bf-p4c or BMv2)")
	}
	t, err := Prepare()
	if errors.Is(err, ErrAbsent) {
		tb.Skipf("skipped: %v", err)
	}
	if err != nil {
		tb.Fatal(err)
	}
	return t
}

// short reports whether the test binary runs with -short, read from the
// flag that package testing registers, so that this package need not
// import testing.
func short() bool {
	f := flag.Lookup("test.short")
	return f != nil && f.Value.String() == "true"
}
