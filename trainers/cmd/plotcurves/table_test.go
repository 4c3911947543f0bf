package main

import (
	"strings"
	"testing"
)

func runOf(path, backend string, wire int, seed int64, accs ...float64) curve {
	c := curve{path: path}
	for i, a := range accs {
		c.recs = append(c.recs, record{Epoch: i + 1, Backend: backend, WireBits: wire, Seed: seed, TestAccuracy: a, TestLoss: 0.3})
	}
	return c
}

// Each run is compared with the reference run of its own seed, and
// several seeds get the mean and the largest difference.
func TestTableComparesWithTheReferenceOfTheSameSeed(t *testing.T) {
	runs := []curve{
		runOf("exact-seed1.jsonl", "exact", 0, 1, 0.85, 0.9051),
		runOf("w16-seed1.jsonl", "switchml", 16, 1, 0.86, 0.9020),
		runOf("exact-seed2.jsonl", "exact", 0, 2, 0.85, 0.9000),
		runOf("w16-seed2.jsonl", "switchml", 16, 2, 0.86, 0.9010),
	}
	var b strings.Builder
	if err := writeTable(&b, runs, "exact"); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"| switchml, 16-bit wire | 1 | 86.00% | 90.20% | 0.3000 | -0.31 | `w16-seed1.jsonl` |",
		"| switchml, 16-bit wire | 2 | 86.00% | 90.10% | 0.3000 | +0.10 | `w16-seed2.jsonl` |",
		"| exact | 2 | 85.00% | 90.00% | 0.3000 | +0.00 |",
		"| switchml, 16-bit wire | 2 | -0.10 | 0.31 |",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	if err := writeTable(&b, runs[1:2], "exact"); err == nil || !strings.Contains(err.Error(), `no "exact" run of seed 1`) {
		t.Errorf("a run without its reference: %v", err)
	}
}
