package local_test

import (
	"context"
	"fmt"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/switchml/switchml-go/p4/local"
	"github.com/switchml/switchml-go/quant"
	"github.com/switchml/switchml-go/switchml"
	"github.com/switchml/switchml-go/switchml/dtype"
)

// wire16Input is rank's value i: mixed signs and scales within the 512-value
// blocks of the 16-bit wire.
func wire16Input(rank, i int) float64 {
	return math.Sin(float64(i*(rank+3))) * math.Pow(2, float64(i/512%7-3))
}

// TestWire16JobOnEmbeddedFabric runs three workers over real UDP through the
// embedded switch: bfloat16 and float16 at 16 bits by default, float32 at
// 16 bits with WireBits 16 and at 32 without, and bfloat16 at 32 with
// WireBits 32. Every sum is within the bound of its type and width, every
// rank gets the same, and the 16-bit calls send at most 0.55 of the 32-bit
// call's packets, each with as many payload bytes.
func TestWire16JobOnEmbeddedFabric(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	fab := local.ForTest(t, local.Options{})
	const n, size = 3, 100_003
	type call struct {
		name     string
		dt       dtype.Codec
		wireBits int
		narrow   bool
	}
	calls := []call{
		{"float32", dtype.Float32, 0, false},
		{"bfloat16", dtype.BFloat16, 0, true},
		{"float16", dtype.Float16, 0, true},
		{"float32 --wire-bits 16", dtype.Float32, 16, true},
		{"bfloat16 --wire-bits 32", dtype.BFloat16, 32, false},
	}
	packets := make([]uint64, len(calls))
	for ci, c := range calls {
		results := make([][]byte, n)
		sent := make([]uint64, n)
		errs := make([]error, n)
		var wg sync.WaitGroup
		for r := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				sess, err := switchml.Join(ctx, switchml.Config{Controller: fab.ControllerAddr(), Job: fmt.Sprint("w16-", ci), Rank: r, Workers: n, Lanes: 2, Window: 16, WireBits: c.wireBits})
				if err != nil {
					errs[r] = err
					return
				}
				defer sess.Close()
				data := dtype.New(c.dt, size)
				for i := range size {
					c.dt.Set(data, i, wire16Input(r, i))
				}
				if errs[r] = sess.AllReduce(ctx, c.dt, data); errs[r] == nil {
					// First transmissions, what the protocol decides:
					// retransmissions grow with the load on the machine.
					st := sess.Stats()
					results[r], sent[r] = data, st.Packets-st.Retransmits
				}
			}()
		}
		wg.Wait()
		for r, err := range errs {
			if err != nil {
				t.Fatalf("%s, rank %d: %v", c.name, r, err)
			}
		}
		k := 256 // the embedded switch's packet size
		if c.narrow {
			k *= 2
		}
		for lo := 0; lo < size; lo += k {
			hi := min(lo+k, size)
			e := quant.MinExponent
			in := make([][]byte, n)
			for r := range n {
				in[r] = dtype.New(c.dt, hi-lo)
				for j := lo; j < hi; j++ {
					c.dt.Set(in[r], j-lo, wire16Input(r, j))
				}
				ex, _ := c.dt.Exponent(in[r], false)
				e = max(e, ex)
			}
			bound := c.dt.Bound(n, e)
			if c.narrow {
				bound = c.dt.(dtype.Wire16).Bound16(n, e)
			}
			for i := lo; i < hi; i++ {
				exact := 0.0
				for r := range n {
					exact += c.dt.Get(in[r], i-lo)
				}
				got := c.dt.Get(results[0], i)
				if math.Abs(got-exact) > bound {
					t.Fatalf("%s: element %d = %g, exact %g: error beyond %g", c.name, i, got, exact, bound)
				}
				for r := 1; r < n; r++ {
					if c.dt.Get(results[r], i) != got {
						t.Fatalf("%s: rank %d's element %d differs from rank 0's", c.name, r, i)
					}
				}
			}
		}
		packets[ci] = sent[0]
		t.Logf("%s: %d packets sent by rank 0 (first transmissions)", c.name, sent[0])
	}
	// Every data packet carries 1 KiB of payload at either width, and the
	// exponent round is the same: the packet count is the bytes' share.
	for ci, c := range calls {
		if ratio := float64(packets[ci]) / float64(packets[0]); c.narrow && ratio > 0.55 {
			t.Errorf("%s: %.3f of float32's packets for as many values, want at most 0.55", c.name, ratio)
		} else if !c.narrow && packets[ci] != packets[0] {
			t.Errorf("%s: %d packets on the 32-bit wire, float32 sent %d", c.name, packets[ci], packets[0])
		}
	}
}

// TestWire16MustAgree: ranks that disagree on the wire width cannot form a
// job, and are told which field.
func TestWire16MustAgree(t *testing.T) {
	mustAgree(t, "mixed-width", "wire_bits", func(*switchml.Config) {}, func(c *switchml.Config) { c.WireBits = 16 })
}
