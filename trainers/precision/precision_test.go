package precision

import (
	"context"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/switchml/switchml-go/quant"
	"github.com/switchml/switchml-go/trainers/density"
)

// record writes ranks' gradients of two buckets as density --dump does:
// positive values in [0.5, 1.5) (no sum cancels), except the first 512
// values of the second bucket, one 16-bit block, where value 0 is 1 and
// the others 1e-7 at every rank.
func record(t *testing.T, ranks int) (dir string, buckets []int) {
	t.Helper()
	dir = t.TempDir()
	buckets = []int{1000, 3000}
	rng := rand.New(rand.NewPCG(1, 2))
	for r := range ranks {
		bufs := make([][]float32, len(buckets))
		for i, n := range buckets {
			bufs[i] = make([]float32, n)
			for j := range bufs[i] {
				bufs[i][j] = float32(0.5 + rng.Float64())
			}
		}
		for j := 1; j < 512; j++ {
			bufs[1][j] = 1e-7
		}
		bufs[1][0] = 1
		if err := density.WriteRank(dir, r, bufs); err != nil {
			t.Fatal(err)
		}
	}
	if err := density.WriteMeta(dir, &density.Meta{Model: "test", Elements: 4000, Buckets: buckets, Ranks: ranks}); err != nil {
		t.Fatal(err)
	}
	return dir, buckets
}

func TestCompare(t *testing.T) {
	const n = 4
	dir, buckets := record(t, n)
	r, err := Compare(context.Background(), dir, Options{Workers: n})
	if err != nil {
		t.Fatal(err)
	}
	if r.Workers != n || r.Elements != 4000 || len(r.Buckets) != len(buckets) || r.NonZero != 4000 {
		t.Fatalf("result %+v", r)
	}
	// Every block's exponent is 1 (values below 2).
	for m, bound := range map[string]float64{
		Wire32: quant.ErrorBound(n, 1),
		Wire16: quant.ErrorBound16(n, 1),
		// Plus each input's rounding to bfloat16, half an ulp below 2.
		Wire16BF16: quant.ErrorBound16BF16(n, 1) + n*0x1p-8,
	} {
		if e := r.Errors[m]; e.MaxErr > bound || e.MaxErr == 0 {
			t.Errorf("%s: largest error %g, want (0, %g]", m, e.MaxErr, bound)
		}
	}
	// The 511 values of 1e-7 beside 1 are below the 16-bit wire's step
	// (n * 2 / (2^15-1)): they vanish from its sums, bfloat16 or not, and
	// from no other.
	for m, want := range map[string]int64{Wire32: 0, Wire16: 511, Wire16BF16: 511, RingBF16: 0, RingF32: 0} {
		if got := r.Errors[m].ZeroedCount; got != want {
			t.Errorf("%s: %d non-zero sums came out 0, want %d", m, got, want)
		}
		if got := r.Buckets[1].Errors[m].ZeroedCount; got != want {
			t.Errorf("%s: %d non-zero sums of bucket 1 came out 0, want %d", m, got, want)
		}
	}
	if z := r.Errors[Wire16].Zeroed; z != 511.0/4000 {
		t.Errorf("16-bit wire: share zeroed %g, want %g", z, 511.0/4000)
	}
	// A float32 sum of 4 values near 1 is off by a few ulps; a bfloat16
	// one by a few of bfloat16's.
	if e := r.Errors[RingF32].RelL2; e > 1e-6 {
		t.Errorf("float32 ring: relative L2 error %g", e)
	}
	if e := r.Errors[RingBF16].RelL2; e < 1e-4 || e > 1e-2 {
		t.Errorf("bfloat16 ring: relative L2 error %g, want bfloat16's (1e-4..1e-2)", e)
	}

	var md strings.Builder
	if err := Markdown(&md, &Header{Command: "wireprecision", Date: "today"}, []*Result{r}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"(test): 4000 values in 2 buckets, 4 workers", "| SwitchML, 16-bit wire (float32) |", "| 1 | 3000 | 100.00% |"} {
		if !strings.Contains(md.String(), want) {
			t.Errorf("Markdown lacks %q:\n%s", want, md.String())
		}
	}
}

func TestCompareRefusesMoreWorkersThanRecorded(t *testing.T) {
	dir, _ := record(t, 2)
	if _, err := Compare(context.Background(), dir, Options{Workers: 3}); err == nil || !strings.Contains(err.Error(), "want 2..2") {
		t.Errorf("3 workers of 2 recorded: %v", err)
	}
}
