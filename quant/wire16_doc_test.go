package quant

import (
	"fmt"
	"os"
	"regexp"
	"strconv"
	"testing"
)

// TestDesignTableOfBounds checks the table of relative bounds in
// docs/design.md ("The 16-bit wire") against ErrorBound16 and ErrorBound:
// the figures there are these functions' values, to two digits.
func TestDesignTableOfBounds(t *testing.T) {
	doc, err := os.ReadFile("../docs/design.md")
	if err != nil {
		t.Fatal(err)
	}
	row := regexp.MustCompile(`(?m)^\| (\d+) \| ([0-9.e-]+) \| ([0-9.e-]+) \| ([0-9.e-]+) \|$`)
	rows := row.FindAllStringSubmatch(string(doc), -1)
	if len(rows) < 5 {
		t.Fatalf("found %d rows of the bounds table in docs/design.md, want at least 5", len(rows))
	}
	for _, r := range rows {
		n, _ := strconv.Atoi(r[1])
		span := float64(n) // relative to n*2^E, with E = 0
		for i, want := range []float64{ErrorBound16(n, 0) / span, ErrorBound(n, 0) / span, 0x1p-9} {
			if got := fmt.Sprintf("%.1e", want); got != r[2+i] && fmt.Sprintf("%.1e", want) != normal(r[2+i]) {
				t.Errorf("docs/design.md, %d workers, column %d: %s, the function gives %s", n, i+2, r[2+i], got)
			}
		}
	}
}

// normal writes a figure as %.1e does.
func normal(s string) string {
	v, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return s
	}
	return fmt.Sprintf("%.1e", v)
}
