// Package data loads image classification data sets and hands out the
// per-worker batches of data-parallel training.
package data

import (
	"bufio"
	"compress/gzip"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
)

// FashionMNISTDir is where Debian's dataset-fashion-mnist package puts the
// IDX files.
const FashionMNISTDir = "/usr/share/datasets/fashion-mnist"

// Set is a labelled image set, images NHWC float32 in [0, 1].
type Set struct {
	Images           []float32
	Labels           []uint8
	H, W, C, Classes int
}

// Len is the number of examples.
func (s *Set) Len() int { return len(s.Labels) }

// ExampleSize is H*W*C.
func (s *Set) ExampleSize() int { return s.H * s.W * s.C }

// Subset returns the first n examples (all when n <= 0 or n >= Len).
func (s *Set) Subset(n int) *Set {
	if n <= 0 || n >= s.Len() {
		return s
	}
	c := *s
	c.Images = s.Images[:n*s.ExampleSize()]
	c.Labels = s.Labels[:n]
	return &c
}

// Shard returns the examples with index ≡ rank (mod workers): a static,
// disjoint split used for sharded evaluation.
func (s *Set) Shard(rank, workers int) *Set {
	c := *s
	c.Images, c.Labels = nil, nil
	es := s.ExampleSize()
	for i := rank; i < s.Len(); i += workers {
		c.Images = append(c.Images, s.Images[i*es:(i+1)*es]...)
		c.Labels = append(c.Labels, s.Labels[i])
	}
	return &c
}

// Gather copies the examples at idx into x (images) and y (one-hot labels).
func (s *Set) Gather(idx []int, x, y []float32) {
	es := s.ExampleSize()
	clear(y[:len(idx)*s.Classes])
	for j, i := range idx {
		copy(x[j*es:(j+1)*es], s.Images[i*es:(i+1)*es])
		y[j*s.Classes+int(s.Labels[i])] = 1
	}
}

// ErrNotInstalled tells that the data set files are missing.
var ErrNotInstalled = errors.New("data set not installed")

// LoadFashionMNIST reads the train and test splits from dir (the Debian
// package's gzip IDX files; uncompressed files are accepted too).
func LoadFashionMNIST(dir string) (train, test *Set, err error) {
	if dir == "" {
		dir = FashionMNISTDir
	}
	load := func(images, labels string) (*Set, error) {
		x, h, w, err := readIDXImages(filepath.Join(dir, images))
		if err != nil {
			return nil, err
		}
		y, err := readIDXLabels(filepath.Join(dir, labels))
		if err != nil {
			return nil, err
		}
		if len(y)*h*w != len(x) {
			return nil, fmt.Errorf("fashion-mnist: %s has %d images, %s has %d labels", images, len(x)/(h*w), labels, len(y))
		}
		for i, l := range y {
			if l >= 10 {
				return nil, fmt.Errorf("fashion-mnist: %s: label %d of example %d out of range", labels, l, i)
			}
		}
		return &Set{Images: x, Labels: y, H: h, W: w, C: 1, Classes: 10}, nil
	}
	if train, err = load("train-images-idx3-ubyte", "train-labels-idx1-ubyte"); err != nil {
		return nil, nil, err
	}
	if test, err = load("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"); err != nil {
		return nil, nil, err
	}
	return train, test, nil
}

// openIDX opens name.gz or name.
func openIDX(path string) (io.ReadCloser, error) {
	f, err := os.Open(path + ".gz")
	if errors.Is(err, fs.ErrNotExist) {
		if f2, err2 := os.Open(path); err2 == nil {
			return f2, nil
		}
		return nil, fmt.Errorf("%w: %s.gz is missing: apt-get install dataset-fashion-mnist (or run trainers/setup.sh)", ErrNotInstalled, path)
	}
	if err != nil {
		return nil, err
	}
	z, err := gzip.NewReader(bufio.NewReader(f))
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("%s.gz: %w", path, err)
	}
	return struct {
		io.Reader
		io.Closer
	}{z, f}, nil
}

func readIDXHeader(r io.Reader, path string, wantType byte, dims int) ([]int, error) {
	var magic [4]byte
	if _, err := io.ReadFull(r, magic[:]); err != nil {
		return nil, fmt.Errorf("%s: reading IDX header: %w", path, err)
	}
	if magic[0] != 0 || magic[1] != 0 || magic[2] != wantType || int(magic[3]) != dims {
		return nil, fmt.Errorf("%s: not an IDX file of %d-D unsigned bytes (magic %x)", path, dims, magic)
	}
	out := make([]int, dims)
	for i := range out {
		var d uint32
		if err := binary.Read(r, binary.BigEndian, &d); err != nil {
			return nil, fmt.Errorf("%s: reading IDX header: %w", path, err)
		}
		if d == 0 || d > 1<<24 {
			return nil, fmt.Errorf("%s: implausible dimension %d", path, d)
		}
		out[i] = int(d)
	}
	return out, nil
}

func readIDXImages(path string) (x []float32, h, w int, err error) {
	rc, err := openIDX(path)
	if err != nil {
		return nil, 0, 0, err
	}
	defer rc.Close()
	d, err := readIDXHeader(rc, path, 0x08, 3)
	if err != nil {
		return nil, 0, 0, err
	}
	raw := make([]byte, d[0]*d[1]*d[2])
	if _, err := io.ReadFull(rc, raw); err != nil {
		return nil, 0, 0, fmt.Errorf("%s: truncated image data: %w", path, err)
	}
	x = make([]float32, len(raw))
	for i, b := range raw {
		x[i] = float32(b) / 255
	}
	return x, d[1], d[2], nil
}

func readIDXLabels(path string) ([]uint8, error) {
	rc, err := openIDX(path)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	d, err := readIDXHeader(rc, path, 0x08, 1)
	if err != nil {
		return nil, err
	}
	y := make([]uint8, d[0])
	if _, err := io.ReadFull(rc, y); err != nil {
		return nil, fmt.Errorf("%s: truncated label data: %w", path, err)
	}
	return y, nil
}

// Synthetic makes a learnable 10-class image set: each class has a fixed
// random prototype image and examples are noisy copies of it. The same seed
// gives the same set on every worker.
func Synthetic(n, h, w, classes int, seed uint64) *Set {
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	es := h * w
	protos := make([]float32, classes*es)
	for i := range protos {
		protos[i] = rng.Float32()
	}
	s := &Set{Images: make([]float32, n*es), Labels: make([]uint8, n), H: h, W: w, C: 1, Classes: classes}
	for i := 0; i < n; i++ {
		c := rng.IntN(classes)
		s.Labels[i] = uint8(c)
		for k := 0; k < es; k++ {
			v := protos[c*es+k] + float32(rng.NormFloat64()*0.35)
			s.Images[i*es+k] = min(max(v, 0), 1)
		}
	}
	return s
}

// Batches plans data-parallel epochs: each epoch shuffles the whole set with
// a generator seeded by (seed, epoch), identical on every worker, and cuts
// it into global batches of Workers*Batch examples; worker r takes the r-th
// slice of each. The examples left over at the end of an epoch are skipped.
type Batches struct {
	Set                  *Set
	Batch, Rank, Workers int
	Seed                 uint64

	perm []int
}

// Steps is the number of steps per epoch.
func (b *Batches) Steps() int { return b.Set.Len() / (b.Batch * b.Workers) }

// Epoch prepares the order of the given epoch.
func (b *Batches) Epoch(epoch int) {
	rng := rand.New(rand.NewPCG(b.Seed, uint64(epoch)))
	b.perm = rng.Perm(b.Set.Len())
}

// Indices returns this worker's example indices for a step of the current
// epoch.
func (b *Batches) Indices(step int) []int {
	start := (step*b.Workers + b.Rank) * b.Batch
	return b.perm[start : start+b.Batch]
}

// Fingerprint is a short digest of the set's shape, labels and pixels: two
// hosts that load the same examples get the same string, whatever files
// they came from.
func (s *Set) Fingerprint() string {
	h := sha256.New()
	var buf []byte
	for _, v := range []int{s.H, s.W, s.C, s.Classes, s.Len()} {
		buf = binary.LittleEndian.AppendUint64(buf, uint64(v))
	}
	buf = append(buf, s.Labels...)
	h.Write(buf)
	const chunk = 1 << 14
	for i := 0; i < len(s.Images); i += chunk {
		buf = buf[:0]
		for _, v := range s.Images[i:min(i+chunk, len(s.Images))] {
			buf = binary.LittleEndian.AppendUint32(buf, math.Float32bits(v))
		}
		h.Write(buf)
	}
	return hex.EncodeToString(h.Sum(nil)[:8])
}
