package programs

import (
	"bytes"
	"compress/gzip"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/switchml/switchml-go/p4/p4tools"
)

// envUpdateBfrt, set to 1, makes TestBfrtJSONCheckedIn write the
// compiler's bfrt.json files over the checked-in ones.
const envUpdateBfrt = "SWITCHML_UPDATE_BFRT"

// The Stratum stand-in of p4/stratum's tests maps P4Info ids to BF Runtime
// ids from the bfrt.json bf-p4c writes, as stratum_bfrt does; it serves
// the checked-in copies (gzipped, a few kB each), which must be what the
// compiler writes for the programs.
func TestBfrtJSONCheckedIn(t *testing.T) {
	for _, c := range []struct {
		file string
		out  func(t *testing.T) *compiled
	}{
		{"tofino", compiledTNA},
		{"tofino2", compiledTofino2},
		{"tofino2-leaf", func(t *testing.T) *compiled {
			c := bfp4cLeaf(p4tools.ForTest(t), leafSource(t), "tofino2-leaf", "tofino2", "t2na")
			return c.get(t)
		}},
	} {
		t.Run(c.file, func(t *testing.T) {
			compiledJSON, err := os.ReadFile(filepath.Join(c.out(t).dir, "out", "bfrt.json"))
			if err != nil {
				t.Fatal(err)
			}
			path := filepath.Join("..", "stratum", "testdata", c.file+".bfrt.json.gz")
			if os.Getenv(envUpdateBfrt) == "1" {
				writeGzip(t, path, compiledJSON)
			}
			if got := readGzip(t, path); !bytes.Equal(got, compiledJSON) {
				t.Errorf("%s is not the bfrt.json bf-p4c writes for this program: run this test with %s=1 to replace it", path, envUpdateBfrt)
			}
		})
	}
}

func writeGzip(t *testing.T, path string, b []byte) {
	t.Helper()
	var buf bytes.Buffer
	zw, err := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := zw.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

func readGzip(t *testing.T, path string) []byte {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	b, err := io.ReadAll(zr)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return b
}
