package precision

import "github.com/switchml/switchml-go/quant"

// glooRing is how Gloo's ring allreduce (gloo/allreduce.cc, the algorithm
// torch.distributed's gloo backend runs for dense CPU tensors across
// hosts) cuts a buffer among the ranks and in which order it adds their
// values.
//
// The buffer is cut into numSegments segments, numSegments the number of
// 1 MiB segments rounded up to a multiple of the ranks and at least twice
// their number; rank c's chunk is segments c*perRank .. (c+1)*perRank-1.
// In the reduce-scatter every rank sends to rank-1 and receives from
// rank+1: rank r first sends its own values of chunk r+1, and each
// receiver adds its own value to the partial sum it got and passes it on.
// So chunk c starts at rank c-1, runs down the ring and ends at rank c:
//
//	((x[c-1] + x[c-2]) + x[c-3]) + ... + x[c]   (ranks mod n)
//
// with the sum rounded to the tensor's type after every add (Gloo's
// sum<T> computes a[i] + b[i] in T: for bfloat16, in float32 rounded back
// to bfloat16). The all-gather copies the sums, which every rank then
// holds bit for bit. (With LOCAL_WORLD_SIZE equal to the world, as
// torchrun sets it on one host, recent Gloo reduces through shared memory
// instead; across hosts it runs this ring.)
type glooRing struct {
	ranks    int
	segElems int // values per segment
	perRank  int // segments per rank
}

// glooMaxSegmentBytes is Gloo's AllreduceOptions kMaxSegmentSize.
const glooMaxSegmentBytes = 1 << 20

func newGlooRing(elements, elemSize, ranks int) glooRing {
	total := elements * elemSize
	maxSeg := elemSize * max(1, glooMaxSegmentBytes/elemSize)
	segs := roundUp(max(ceilDiv(total, maxSeg), 2*ranks), ranks)
	segBytes := roundUp(ceilDiv(total, segs), elemSize)
	return glooRing{ranks: ranks, segElems: max(1, segBytes/elemSize), perRank: segs / ranks}
}

// owner is the rank whose chunk holds value j, the last to add to its sum.
func (g glooRing) owner(j int) int { return j / g.segElems / g.perRank }

// sumBF16 is value j's sum as the ring computes it on bfloat16 inputs x
// (the widened bfloat16 of every rank's value, in rank order), a bfloat16
// value widened to float32.
func (g glooRing) sumBF16(x []float32, j int) float32 {
	n, c := g.ranks, g.owner(j)
	acc := x[(c-1+n)%n]
	for k := 2; k <= n; k++ {
		acc = roundBF16(acc + x[((c-k)%n+n)%n])
	}
	return acc
}

// sumF32 is value j's sum as the ring computes it on float32 inputs.
func (g glooRing) sumF32(x []float32, j int) float32 {
	n, c := g.ranks, g.owner(j)
	acc := x[(c-1+n)%n]
	for k := 2; k <= n; k++ {
		acc += x[((c-k)%n+n)%n]
	}
	return acc
}

// roundBF16 rounds a float32 to the nearest bfloat16 (ties to even), as
// c10::BFloat16 does, and widens it back.
func roundBF16(x float32) float32 { return quant.BF16ToFloat32(quant.Float32ToBF16(x)) }

func ceilDiv(a, b int) int { return (a + b - 1) / b }

func roundUp(a, m int) int { return ceilDiv(a, m) * m }
