package testreport

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// find returns the outcome of the test pkg.name in res.
func find(t *testing.T, res *Results, pkg, name string) Test {
	t.Helper()
	for _, x := range res.Tests {
		if x.Package == pkg && x.Name == name {
			return x
		}
	}
	t.Fatalf("no %s %s among %d outcomes", pkg, name, len(res.Tests))
	return Test{}
}

func readGo(t *testing.T, file string) (*Results, string) {
	t.Helper()
	f, err := os.Open(filepath.Join("testdata", file))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var echo bytes.Buffer
	res, err := ReadGoJSON(f, &echo)
	if err != nil {
		t.Fatal(err)
	}
	return res, echo.String()
}

// testdata/gotest.json is what go test -json printed for a module whose
// package a has a passing, a skipped and a failing test and a skipped
// subtest, b a test that panics, c a test file that does not compile.
func TestReadGoJSON(t *testing.T) {
	res, echo := readGo(t, "gotest.json")
	const a, b, c = "example.com/fx/a", "example.com/fx/b", "example.com/fx/c"
	if got := find(t, res, a, "TestPasses"); got.Status != Passed {
		t.Errorf("TestPasses: %+v", got)
	}
	if got := find(t, res, a, "TestSkips"); got.Status != Skipped || got.Detail != "a_test.go:7: needs the P4 toolchain: none at /x" {
		t.Errorf("TestSkips: %+v", got)
	}
	if got := find(t, res, a, "TestSub/skipped"); got.Status != Skipped || !strings.HasSuffix(got.Detail, "skipped with -short: starts 4 processes") {
		t.Errorf("TestSub/skipped: %+v", got)
	}
	if got := find(t, res, a, "TestFails"); got.Status != Failed || !strings.Contains(got.Detail, "sum = 3, want 4") || !strings.Contains(got.Detail, "first line") {
		t.Errorf("TestFails: %+v", got)
	}
	if got := find(t, res, b, "TestDies"); got.Status != Failed || !strings.Contains(got.Detail, "assignment to entry in nil map") {
		t.Errorf("TestDies: %+v", got)
	}
	if got := find(t, res, c, "(package)"); got.Status != Failed || !strings.Contains(got.Detail, "undefined: undefined") {
		t.Errorf("the build failure of c: %+v", got)
	}
	if n, want := len(res.Tests), 8; n != want {
		t.Errorf("%d outcomes, want %d: %+v", n, want, res.Tests)
	}
	if got, want := [3]int{res.Count(Passed), res.Count(Failed), res.Count(Skipped)}, [3]int{3, 3, 2}; got != want {
		t.Errorf("passed, failed, skipped = %v, want %v", got, want)
	}
	for _, want := range []string{"FAIL\texample.com/fx/a", "--- FAIL: TestFails (example.com/fx/a)", "sum = 3, want 4",
		"--- SKIP: TestSkips (example.com/fx/a): a_test.go:7: needs the P4 toolchain", "FAIL\texample.com/fx/c", "undefined: undefined"} {
		if !strings.Contains(echo, want) {
			t.Errorf("the echo lacks %q:\n%s", want, echo)
		}
	}
	if strings.Contains(echo, "=== RUN") {
		t.Errorf("the echo shows the runner's framing lines:\n%s", echo)
	}
}

// testdata/timeout.json: a package whose subtest was still running when
// go test's -timeout ended the binary. The innermost test is the failure,
// once, with the panic's message.
func TestReadGoJSONTimeout(t *testing.T) {
	res, _ := readGo(t, "timeout.json")
	if len(res.Tests) != 1 {
		t.Fatalf("%d outcomes, want 1: %+v", len(res.Tests), res.Tests)
	}
	got := res.Tests[0]
	if got.Name != "TestHangs/inner" || got.Status != Failed || !strings.Contains(got.Detail, "test timed out after 2s") {
		t.Errorf("%+v", got)
	}
}

// A stream cut short (the runner killed) leaves its running tests failed.
func TestReadGoJSONCutShort(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("testdata", "timeout.json"))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	res, err := ReadGoJSON(strings.NewReader(strings.Join(lines[:len(lines)-1], "\n")), &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Tests) != 1 || res.Tests[0].Name != "TestHangs/inner" || res.Tests[0].Status != Failed {
		t.Errorf("%+v", res.Tests)
	}
}

func TestReadJUnit(t *testing.T) {
	f, err := os.Open(filepath.Join("testdata", "pytest.xml"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	res, err := ReadJUnit(f)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := [3]int{res.Count(Passed), res.Count(Failed), res.Count(Skipped)}, [3]int{2, 2, 1}; got != want {
		t.Errorf("passed, failed, skipped = %v, want %v", got, want)
	}
	if got := find(t, res, "test_backend.Refusals", "test_ctrl_c"); !strings.Contains(got.Detail, "E       AssertionError: 0 == 0") {
		t.Errorf("the failure's text: %+v", got)
	}
	if got := find(t, res, "test_backend.OpsAgainstGloo", "test_sum_and_avg"); got.Status != Failed || !strings.Contains(got.Detail, "No backend type") {
		t.Errorf("an error in set-up is a failure: %+v", got)
	}
	if got := find(t, res, "test_local.Loading", "test_gpu"); got.Detail != "no CUDA device here" {
		t.Errorf("the skip's reason: %+v", got)
	}
	if _, err := ReadJUnit(strings.NewReader("not xml")); err == nil {
		t.Error("a report that is not XML was read without an error")
	}
}

// row returns the fields of the summary's table row for stage, after the
// stage's name, joined by single spaces.
func row(summary, stage string) string {
	for _, l := range strings.Split(summary, "\n") {
		if f := strings.Fields(l); len(f) > 0 && f[0] == stage {
			return strings.Join(f[1:], " ")
		}
	}
	return ""
}

// writeRun lays out a run directory as scripts/test.sh does.
func writeRun(t *testing.T, stages string, results map[string]*Results) string {
	t.Helper()
	dir := t.TempDir()
	stages = strings.ReplaceAll(stages, "DIR", dir)
	if err := os.WriteFile(filepath.Join(dir, "stages.tsv"), []byte(stages), 0o644); err != nil {
		t.Fatal(err)
	}
	for name, r := range results {
		b, _ := json.Marshal(r)
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestSummary(t *testing.T) {
	var logLines strings.Builder
	for i := 1; i <= 30; i++ {
		fmt.Fprintf(&logLines, "log line %d\n", i)
	}
	dir := writeRun(t, "lint\t1\t12.4\tDIR/lint.log\nrace\t0\t300\tDIR/race.log\npython\t0\t61\tDIR/python.log\n",
		map[string]*Results{
			"race.results.json": {Tests: []Test{
				{Package: "p/x", Name: "TestA", Status: Passed, Seconds: 42.5},
				{Package: "p/x", Name: "TestA/sub", Status: Passed, Seconds: 40},
				{Package: "p/x", Name: "TestB", Status: Failed, Detail: "=== RUN TestB\n    x_test.go:3: got 1, want 2\n--- FAIL: TestB\n"},
				{Package: "p/y", Name: "TestC", Status: Skipped, Detail: "y_test.go:9: needs root"},
			}},
			"python.torch1.results.json": {Tests: []Test{{Package: "test_local.Loading", Name: "test_x", Status: Passed}}},
			"python.torch2.results.json": {Tests: []Test{{Package: "test_local.Loading", Name: "test_x", Status: Skipped, Detail: "no torch 2"}}},
		})
	if err := os.WriteFile(filepath.Join(dir, "lint.log"), []byte(logLines.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	stages, err := ReadRun(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !RunFailed(stages) {
		t.Error("a run with a failed stage and a failed test is not reported failed")
	}
	var out bytes.Buffer
	WriteSummary(&out, stages, 370*time.Second)
	s := out.String()
	for stage, want := range map[string]string{
		"lint": "FAILED 0:12 0 0 0", "race": "FAILED 5:00 2 1 1", "python": "ok 1:01 1 0 1",
		"total": "6:10 (wall clock; stages overlap)",
	} {
		if got := row(s, stage); got != want {
			t.Errorf("the summary's row of %s is %q, want %q:\n%s", stage, got, want, s)
		}
	}
	for _, want := range []string{
		"[race] p/x TestB\n        x_test.go:3: got 1, want 2\n",
		"[lint] exited 1 with no failed test reported",
		"log line 30", "[race] p/y TestC: y_test.go:9: needs root",
		"[python] test_local.Loading test_x: no torch 2",
		"\ntests: 3 passed, 1 failed, 2 skipped\n",
		"slowest tests:\n     42.5s  [race] p/x TestA\n",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("the summary lacks %q:\n%s", want, s)
		}
	}
	if strings.Contains(s, "TestA/sub") {
		t.Errorf("the slowest tests list a subtest beside its parent:\n%s", s)
	}
	if strings.Contains(s, "log line 15\n") {
		t.Errorf("the summary shows more than the log's last 15 lines:\n%s", s)
	}

	ok, err := ReadRun(writeRun(t, "race\t0\t1\tDIR/race.log\n", map[string]*Results{
		"race.results.json": {Tests: []Test{{Package: "p", Name: "T", Status: Skipped, Detail: "why"}}}}))
	if err != nil {
		t.Fatal(err)
	}
	if RunFailed(ok) {
		t.Error("a run with only passed stages and skipped tests is reported failed")
	}
	if _, err := ReadRun(writeRun(t, "race\tx\t1\tDIR/race.log\n", nil)); err == nil || !strings.Contains(err.Error(), "status") {
		t.Errorf("a bad status line: %v", err)
	}
}
