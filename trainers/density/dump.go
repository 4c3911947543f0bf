package density

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
)

// Meta describes a dumped step: DIR/<model>/rank<r>.f32 holds rank r's
// gradient, every bucket's buffer one after the other in the order they
// are allreduced, as raw little-endian float32, Elements values.
type Meta struct {
	Model    string `json:"model"`
	Elements int    `json:"elements"`
	// Buckets are the sizes of the buffers the file concatenates (the
	// allreduce calls of one step), in order.
	Buckets []int    `json:"buckets"`
	Ranks   int      `json:"ranks"`
	Files   []string `json:"files"`
	Format  string   `json:"format"`
	// Step is the 0-based training step (Warmup steps came before it);
	// every rank computed its gradient from the same weights on its own
	// batch of Batch examples.
	Step   int    `json:"step"`
	Warmup int    `json:"warmup"`
	Batch  int    `json:"batch"`
	Input  string `json:"input"`
	Seed   int64  `json:"seed"`
	// Densities of this step, by block size ("256", "64").
	Densities map[string]StepDensity `json:"densities"`
	Commit    string                 `json:"commit,omitempty"`
}

// DefaultDumpDir is where the gradients go unless density --dump says
// otherwise, and where the commands that read them look: beside the
// libraries trainers/setup.sh caches, outside the repository.
func DefaultDumpDir() string {
	if c := os.Getenv("SWITCHML_CACHE"); c != "" {
		return filepath.Join(c, "gradients")
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return ""
	}
	return filepath.Join(home, ".cache", "switchml", "gradients")
}

// RankFile is the name of rank r's gradient file.
func RankFile(r int) string { return fmt.Sprintf("rank%d.f32", r) }

// WriteRank writes one rank's bucket buffers to DIR/RankFile(r) as raw
// little-endian float32.
func WriteRank(dir string, r int, bufs [][]float32) error {
	path := filepath.Join(dir, RankFile(r))
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("density: writing the gradient of rank %d: %w", r, err)
	}
	w := bufio.NewWriterSize(f, 1<<20)
	var b [4]byte
	for _, buf := range bufs {
		for _, v := range buf {
			binary.LittleEndian.PutUint32(b[:], math.Float32bits(v))
			if _, err := w.Write(b[:]); err != nil {
				f.Close()
				return fmt.Errorf("density: writing %s: %w", path, err)
			}
		}
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return fmt.Errorf("density: writing %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("density: writing %s: %w", path, err)
	}
	return nil
}

// WriteMeta writes DIR/meta.json.
func WriteMeta(dir string, m *Meta) error {
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "meta.json"), append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("density: writing the dump's meta.json: %w", err)
	}
	return nil
}

// ReadMeta reads DIR/meta.json and checks that its buckets add up to its
// values.
func ReadMeta(dir string) (*Meta, error) {
	path := filepath.Join(dir, "meta.json")
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("density: recorded gradients: %w (record them with density --dump)", err)
	}
	var m Meta
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("density: %s: %w", path, err)
	}
	total := 0
	for _, n := range m.Buckets {
		total += n
	}
	if total != m.Elements || m.Ranks < 1 {
		return nil, fmt.Errorf("density: %s: %d ranks, buckets of %d values in all for %d elements: want at least one rank and buckets that add up", path, m.Ranks, total, m.Elements)
	}
	return &m, nil
}

// ReadRank reads a gradient file written by WriteRank.
func ReadRank(path string) ([]float32, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	if len(b)%4 != 0 {
		return nil, fmt.Errorf("density: %s has %d bytes, not a whole number of float32 values", path, len(b))
	}
	out := make([]float32, len(b)/4)
	for i := range out {
		out[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return out, nil
}
