package data

import (
	"compress/gzip"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func TestLoadFashionMNIST(t *testing.T) {
	if _, err := os.Stat(filepath.Join(FashionMNISTDir, "train-images-idx3-ubyte.gz")); err != nil {
		t.Skipf("Fashion-MNIST not installed (apt-get install dataset-fashion-mnist): %v", err)
	}
	train, test, err := LoadFashionMNIST("")
	if err != nil {
		t.Fatal(err)
	}
	if train.Len() != 60000 || test.Len() != 10000 {
		t.Fatalf("sizes %d/%d, want 60000/10000", train.Len(), test.Len())
	}
	if train.H != 28 || train.W != 28 || train.C != 1 {
		t.Fatalf("shape %dx%dx%d", train.H, train.W, train.C)
	}
	var counts [10]int
	for _, l := range train.Labels {
		counts[l]++
	}
	for c, n := range counts {
		if n != 6000 {
			t.Errorf("class %d has %d training examples, want 6000", c, n)
		}
	}
	var maxv float32
	for _, v := range train.Images[:784*100] {
		maxv = max(maxv, v)
		if v < 0 || v > 1 {
			t.Fatalf("pixel %v outside [0,1]", v)
		}
	}
	if maxv < 0.9 {
		t.Errorf("brightest pixel of 100 images is %v; scaling looks wrong", maxv)
	}
}

func writeIDX(t *testing.T, path string, header []byte, body []byte) {
	f, err := os.Create(path + ".gz")
	if err != nil {
		t.Fatal(err)
	}
	z := gzip.NewWriter(f)
	z.Write(header)
	z.Write(body)
	z.Close()
	f.Close()
}

func TestLoadSmallIDXAndErrors(t *testing.T) {
	dir := t.TempDir()
	if _, _, err := LoadFashionMNIST(dir); !errors.Is(err, ErrNotInstalled) {
		t.Fatalf("missing files: got %v, want ErrNotInstalled", err)
	}
	img := []byte{0, 0, 8, 3, 0, 0, 0, 2, 0, 0, 0, 2, 0, 0, 0, 2}
	pix := []byte{0, 255, 51, 102, 1, 2, 3, 4}
	lab := []byte{0, 0, 8, 1, 0, 0, 0, 2}
	for _, p := range []string{"train", "t10k"} {
		writeIDX(t, filepath.Join(dir, p+"-images-idx3-ubyte"), img, pix)
		writeIDX(t, filepath.Join(dir, p+"-labels-idx1-ubyte"), lab, []byte{3, 9})
	}
	train, _, err := LoadFashionMNIST(dir)
	if err != nil {
		t.Fatal(err)
	}
	if train.Len() != 2 || train.Images[1] != 1 || train.Images[2] != 0.2 || train.Labels[1] != 9 {
		t.Fatalf("decoded %v %v", train.Images, train.Labels)
	}
	// Truncated image data must be an error, not a short set.
	writeIDX(t, filepath.Join(dir, "train-images-idx3-ubyte"), img, pix[:5])
	if _, _, err := LoadFashionMNIST(dir); err == nil {
		t.Fatal("truncated file accepted")
	}
	// A label out of range must be rejected.
	writeIDX(t, filepath.Join(dir, "train-images-idx3-ubyte"), img, pix)
	writeIDX(t, filepath.Join(dir, "train-labels-idx1-ubyte"), lab, []byte{3, 10})
	if _, _, err := LoadFashionMNIST(dir); err == nil {
		t.Fatal("label 10 accepted")
	}
}

func TestBatchesPartitionEpoch(t *testing.T) {
	s := Synthetic(103, 4, 4, 10, 1)
	const workers, batch = 3, 5
	seen := map[int]int{}
	for r := 0; r < workers; r++ {
		b := &Batches{Set: s, Batch: batch, Rank: r, Workers: workers, Seed: 9}
		b.Epoch(2)
		if b.Steps() != 6 {
			t.Fatalf("steps %d, want 6", b.Steps())
		}
		for st := 0; st < b.Steps(); st++ {
			for _, i := range b.Indices(st) {
				seen[i]++
			}
		}
	}
	if len(seen) != 90 {
		t.Fatalf("workers covered %d distinct examples, want 90", len(seen))
	}
	for i, n := range seen {
		if n != 1 {
			t.Fatalf("example %d used %d times", i, n)
		}
	}
	// Different epochs shuffle differently.
	b := &Batches{Set: s, Batch: batch, Workers: 1, Seed: 9}
	b.Epoch(0)
	a0 := append([]int(nil), b.Indices(0)...)
	b.Epoch(1)
	if equal(a0, b.Indices(0)) {
		t.Error("epochs 0 and 1 start with the same batch")
	}
}

func TestShardAndGather(t *testing.T) {
	s := Synthetic(10, 2, 2, 3, 4)
	a, b := s.Shard(0, 2), s.Shard(1, 2)
	if a.Len()+b.Len() != 10 || a.Labels[1] != s.Labels[2] || b.Labels[0] != s.Labels[1] {
		t.Fatal("shards do not interleave the set")
	}
	x := make([]float32, 2*4)
	y := make([]float32, 2*3)
	y[0] = 7 // stale value must be cleared
	s.Gather([]int{3, 0}, x, y)
	if y[int(s.Labels[3])] != 1 || y[3+int(s.Labels[0])] != 1 || x[0] != s.Images[12] {
		t.Fatalf("gather: x=%v y=%v", x, y)
	}
	sum := float32(0)
	for _, v := range y {
		sum += v
	}
	if sum != 2 {
		t.Fatalf("one-hot rows sum to %v", sum)
	}
}

func equal(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestFingerprint(t *testing.T) {
	a := Synthetic(200, 28, 28, 10, 1)
	b := Synthetic(200, 28, 28, 10, 1)
	if a.Fingerprint() != b.Fingerprint() {
		t.Fatal("the same examples give different fingerprints")
	}
	for name, other := range map[string]*Set{
		"fewer examples": a.Subset(199),
		"another seed":   Synthetic(200, 28, 28, 10, 2),
	} {
		if other.Fingerprint() == a.Fingerprint() {
			t.Errorf("%s: same fingerprint", name)
		}
	}
	b.Images[5000] += 1.0 / 255
	if a.Fingerprint() == b.Fingerprint() {
		t.Error("one pixel changed: same fingerprint")
	}
	b = Synthetic(200, 28, 28, 10, 1)
	b.Labels[7] = (b.Labels[7] + 1) % 10
	if a.Fingerprint() == b.Fingerprint() {
		t.Error("one label changed: same fingerprint")
	}
}
