// Package testreport reads what the test runners of scripts/test.sh report
// (go test -json, pytest's JUnit XML) into one shape, echoes a short
// progress log while a run goes, and prints the run's summary at the end:
// each stage's result and time, every failed test with its first lines and
// every skipped test with its reason.
package testreport

import (
	"bufio"
	"encoding/json"
	"encoding/xml"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"
)

// Status is a test's outcome.
type Status string

// The outcomes a test can have.
const (
	Passed  Status = "pass"
	Failed  Status = "fail"
	Skipped Status = "skip"
)

// Test is one test's outcome. Package is the Go package or the Python
// module; Detail is a failure's output or a skip's reason.
type Test struct {
	Package string  `json:"package"`
	Name    string  `json:"name"`
	Status  Status  `json:"status"`
	Detail  string  `json:"detail,omitempty"`
	Seconds float64 `json:"seconds,omitempty"`
}

// Results are the outcomes a stage's runners reported.
type Results struct {
	Tests []Test `json:"tests"`
}

// Count returns how many tests ended with s.
func (r *Results) Count(s Status) int {
	n := 0
	for _, t := range r.Tests {
		if t.Status == s {
			n++
		}
	}
	return n
}

// event is one line of go test -json (cmd/test2json's TestEvent).
type event struct {
	Action      string
	Package     string
	ImportPath  string
	Test        string
	Elapsed     float64
	Output      string
	FailedBuild string
}

// goTest gathers one test's output until it ends.
type goTest struct {
	lines []string
}

// ReadGoJSON reads a go test -json stream. It writes a short log to echo as
// the stream goes (each package's result line, each failed test with its
// output, each skip with its reason) and returns every test's outcome. A
// package that fails without a failing test (a build failure, a panic in
// TestMain, a time-out) is reported as a failed test named after the
// package, with the package's output.
func ReadGoJSON(r io.Reader, echo io.Writer) (*Results, error) {
	res := &Results{}
	running := map[string]*goTest{}   // package + "\x00" + test
	pkgOut := map[string][]string{}   // package-level output lines
	pkgFailed := map[string]bool{}    // a test of the package failed
	buildOut := map[string][]string{} // build output by import path
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		line := sc.Bytes()
		var ev event
		if err := json.Unmarshal(line, &ev); err != nil || ev.Action == "" {
			// go test prints some things outside the stream (a build
			// error of a package with no test files, say): keep them.
			fmt.Fprintln(echo, string(line))
			continue
		}
		key := ev.Package + "\x00" + ev.Test
		switch {
		case ev.Action == "build-output":
			buildOut[ev.ImportPath] = append(buildOut[ev.ImportPath], ev.Output)
		case ev.Action == "build-fail":
			// reported with the package's fail below
		case ev.Test == "" && ev.Action == "output":
			pkgOut[ev.Package] = append(pkgOut[ev.Package], ev.Output)
		case ev.Test == "":
			switch ev.Action {
			case "pass":
				fmt.Fprintf(echo, "ok  \t%s\t%.1fs\n", ev.Package, ev.Elapsed)
			case "fail":
				fmt.Fprintf(echo, "FAIL\t%s\t%.1fs\n", ev.Package, ev.Elapsed)
				// Tests still running when their package failed: the
				// binary died under them (a panic elsewhere, a time-out).
				for _, t := range unfinished(running, ev.Package) {
					pkgFailed[ev.Package] = true
					fmt.Fprintf(echo, "--- FAIL: %s (%s): did not finish\n%s", t.Name, t.Package, indent(t.Detail))
					res.Tests = append(res.Tests, t)
				}
				if !pkgFailed[ev.Package] {
					out := pkgOut[ev.Package]
					if ev.FailedBuild != "" {
						out = append(buildOut[ev.FailedBuild], out...)
					}
					detail := strings.Join(out, "")
					fmt.Fprint(echo, indent(detail))
					res.Tests = append(res.Tests, Test{Package: ev.Package, Name: "(package)", Status: Failed, Detail: detail})
				}
			}
		case ev.Action == "run":
			running[key] = &goTest{}
		case ev.Action == "output":
			if gt := running[key]; gt != nil {
				gt.lines = append(gt.lines, ev.Output)
			} else {
				pkgOut[ev.Package] = append(pkgOut[ev.Package], ev.Output)
			}
		case ev.Action == "pass" || ev.Action == "fail" || ev.Action == "skip":
			gt := running[key]
			delete(running, key)
			var lines []string
			if gt != nil {
				lines = gt.lines
			}
			t := Test{Package: ev.Package, Name: ev.Test, Status: Status(ev.Action), Seconds: ev.Elapsed}
			switch t.Status {
			case Failed:
				pkgFailed[ev.Package] = true
				t.Detail = strings.Join(lines, "")
				fmt.Fprintf(echo, "--- FAIL: %s (%s)\n%s", ev.Test, ev.Package, indent(bodyLines(lines)))
			case Skipped:
				t.Detail = skipReason(lines)
				fmt.Fprintf(echo, "--- SKIP: %s (%s): %s\n", ev.Test, ev.Package, t.Detail)
			}
			res.Tests = append(res.Tests, t)
		}
	}
	if err := sc.Err(); err != nil {
		return res, fmt.Errorf("testreport: reading go test -json: %w", err)
	}
	// Tests still running when the stream ended: the runner was killed.
	pkgs := map[string]bool{}
	for k := range running {
		pkg, _, _ := strings.Cut(k, "\x00")
		pkgs[pkg] = true
	}
	for _, pkg := range slices.Sorted(maps.Keys(pkgs)) {
		res.Tests = append(res.Tests, unfinished(running, pkg)...)
	}
	return res, nil
}

// unfinished takes the tests of pkg that are still running out of running
// and returns the innermost ones (a test none of whose subtests runs) as
// failures: a chain of subtests is one failure, with its output.
func unfinished(running map[string]*goTest, pkg string) []Test {
	var names []string
	for k := range running {
		if p, name, _ := strings.Cut(k, "\x00"); p == pkg && name != "" {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	var out []Test
	for i, name := range names {
		key := pkg + "\x00" + name
		lines := running[key].lines
		delete(running, key)
		if i+1 < len(names) && strings.HasPrefix(names[i+1], name+"/") {
			continue // a subtest of it runs: that one is reported
		}
		out = append(out, Test{Package: pkg, Name: name, Status: Failed,
			Detail: "did not finish (the test binary ended under it)\n" + bodyLines(lines)})
	}
	return out
}

// framing reports whether a line of a test's output is the runner's own
// (=== RUN, --- FAIL: and the like) rather than what the test said.
func framing(line string) bool {
	s := strings.TrimSpace(line)
	return strings.HasPrefix(s, "=== ") || strings.HasPrefix(s, "--- FAIL") ||
		strings.HasPrefix(s, "--- SKIP") || strings.HasPrefix(s, "--- PASS")
}

// bodyLines drops the runner's framing lines from a test's output.
func bodyLines(lines []string) string {
	var b strings.Builder
	for _, l := range lines {
		if framing(l) {
			continue
		}
		b.WriteString(l)
	}
	return b.String()
}

// skipReason is what a skipped test said: its output without the runner's
// lines, each line without the file:line prefix's indentation.
func skipReason(lines []string) string {
	var parts []string
	for _, l := range lines {
		if s := strings.TrimSpace(l); s != "" && !framing(l) {
			parts = append(parts, s)
		}
	}
	if len(parts) == 0 {
		return "(no reason given)"
	}
	return strings.Join(parts, " ")
}

func indent(s string) string {
	if s == "" {
		return ""
	}
	var b strings.Builder
	for _, l := range strings.SplitAfter(s, "\n") {
		if l == "" {
			continue
		}
		b.WriteString("    ")
		b.WriteString(l)
	}
	if !strings.HasSuffix(s, "\n") {
		b.WriteString("\n")
	}
	return b.String()
}

// junitSuites is the part of a JUnit XML report that pytest writes which
// the summary needs (a <testsuites> root holding <testsuite>s, or one
// <testsuite> as the root).
type junitSuites struct {
	XMLName xml.Name
	Suites  []junitSuite `xml:"testsuite"`
	Cases   []junitCase  `xml:"testcase"`
}

type junitSuite struct {
	Cases []junitCase `xml:"testcase"`
}

type junitCase struct {
	Class   string        `xml:"classname,attr"`
	Name    string        `xml:"name,attr"`
	Failure *junitProblem `xml:"failure"`
	Error   *junitProblem `xml:"error"`
	Skipped *junitProblem `xml:"skipped"`
}

type junitProblem struct {
	Message string `xml:"message,attr"`
	Text    string `xml:",chardata"`
}

// ReadJUnit reads a JUnit XML report (pytest --junitxml). An error
// element (a failure in set-up or tear-down) counts as a failure.
func ReadJUnit(r io.Reader) (*Results, error) {
	var doc junitSuites
	if err := xml.NewDecoder(r).Decode(&doc); err != nil {
		return nil, fmt.Errorf("testreport: reading a JUnit report: %w", err)
	}
	cases := doc.Cases
	for _, s := range doc.Suites {
		cases = append(cases, s.Cases...)
	}
	res := &Results{}
	for _, c := range cases {
		t := Test{Package: c.Class, Name: c.Name, Status: Passed}
		switch {
		case c.Failure != nil:
			t.Status, t.Detail = Failed, problem(c.Failure)
		case c.Error != nil:
			t.Status, t.Detail = Failed, problem(c.Error)
		case c.Skipped != nil:
			t.Status, t.Detail = Skipped, strings.TrimSpace(c.Skipped.Message)
			if t.Detail == "" {
				t.Detail = "(no reason given)"
			}
		}
		res.Tests = append(res.Tests, t)
	}
	return res, nil
}

func problem(p *junitProblem) string {
	text := strings.TrimSpace(p.Text)
	if text == "" {
		return p.Message
	}
	return text
}

// Stage is one stage of a run as scripts/test.sh records it.
type Stage struct {
	Name     string
	Code     int // exit status; 0 is success
	Duration time.Duration
	Log      string // the stage's whole output
	Results  *Results
}

// ReadRun reads a run's directory: stages.tsv (name, exit status, seconds,
// log file; one stage a line) and, for each stage, the results files named
// NAME.results.json, NAME.*.results.json.
func ReadRun(dir string) ([]Stage, error) {
	b, err := os.ReadFile(filepath.Join(dir, "stages.tsv"))
	if err != nil {
		return nil, fmt.Errorf("testreport: %w", err)
	}
	var stages []Stage
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if line == "" {
			continue
		}
		f := strings.Split(line, "\t")
		if len(f) != 4 {
			return nil, fmt.Errorf("testreport: stages.tsv line %q: want name, status, seconds and log", line)
		}
		st := Stage{Name: f[0], Log: f[3], Results: &Results{}}
		var secs float64
		if _, err := fmt.Sscan(f[1], &st.Code); err != nil {
			return nil, fmt.Errorf("testreport: stages.tsv line %q: status: %v", line, err)
		}
		if _, err := fmt.Sscan(f[2], &secs); err != nil {
			return nil, fmt.Errorf("testreport: stages.tsv line %q: seconds: %v", line, err)
		}
		st.Duration = time.Duration(secs * float64(time.Second))
		files, _ := filepath.Glob(filepath.Join(dir, st.Name+".*results.json"))
		for _, p := range files {
			var r Results
			b, err := os.ReadFile(p)
			if err == nil {
				err = json.Unmarshal(b, &r)
			}
			if err != nil {
				return nil, fmt.Errorf("testreport: %s: %w", p, err)
			}
			st.Results.Tests = append(st.Results.Tests, r.Tests...)
		}
		stages = append(stages, st)
	}
	return stages, nil
}

// RunFailed reports whether any stage failed or any test did.
func RunFailed(stages []Stage) bool {
	for _, s := range stages {
		if s.Code != 0 || s.Results.Count(Failed) > 0 {
			return true
		}
	}
	return false
}

// WriteSummary writes the run's summary: a table of the stages, every
// failed test with its first lines (or, for a stage that failed with no
// failed test, its log's last lines), every skipped test with its reason,
// and a closing count.
func WriteSummary(w io.Writer, stages []Stage, total time.Duration) {
	const firstLines, logLines = 12, 15
	fmt.Fprintf(w, "\n== summary\n\n%-14s %-7s %8s %7s %7s %7s\n", "stage", "result", "time", "passed", "failed", "skipped")
	var all []Test
	for _, s := range stages {
		result := "ok"
		if s.Code != 0 || s.Results.Count(Failed) > 0 {
			result = "FAILED"
		}
		fmt.Fprintf(w, "%-14s %-7s %8s %7d %7d %7d\n", s.Name, result, clock(s.Duration),
			s.Results.Count(Passed), s.Results.Count(Failed), s.Results.Count(Skipped))
		all = append(all, s.Results.Tests...)
	}
	fmt.Fprintf(w, "%-14s %-7s %8s  (wall clock; stages overlap)\n", "total", "", clock(total))

	var failed []string
	for _, s := range stages {
		n := 0
		for _, t := range s.Results.Tests {
			if t.Status != Failed {
				continue
			}
			n++
			failed = append(failed, fmt.Sprintf("[%s] %s %s\n%s", s.Name, t.Package, t.Name, indent(head(t.Detail, firstLines))))
		}
		if s.Code != 0 && n == 0 {
			failed = append(failed, fmt.Sprintf("[%s] exited %d with no failed test reported; the end of %s:\n%s",
				s.Name, s.Code, s.Log, indent(logTail(s.Log, logLines))))
		}
	}
	if len(failed) > 0 {
		fmt.Fprintf(w, "\nfailed (%d):\n", len(failed))
		for _, f := range failed {
			fmt.Fprint(w, f)
		}
	}

	var skipped []string
	for _, s := range stages {
		for _, t := range s.Results.Tests {
			if t.Status == Skipped {
				skipped = append(skipped, fmt.Sprintf("  [%s] %s %s: %s\n", s.Name, t.Package, t.Name, oneLine(t.Detail, 240)))
			}
		}
	}
	if len(skipped) > 0 {
		fmt.Fprintf(w, "\nskipped (%d):\n", len(skipped))
		for _, s := range skipped {
			fmt.Fprint(w, s)
		}
	}
	writeSlowest(w, stages, 10)
	r := Results{Tests: all}
	fmt.Fprintf(w, "\ntests: %d passed, %d failed, %d skipped\n", r.Count(Passed), r.Count(Failed), r.Count(Skipped))
}

// writeSlowest lists the n top-level tests that took longest: where a
// stage's time goes.
func writeSlowest(w io.Writer, stages []Stage, n int) {
	type timed struct {
		stage string
		t     Test
	}
	var all []timed
	for _, s := range stages {
		for _, t := range s.Results.Tests {
			if t.Seconds > 0 && !strings.Contains(t.Name, "/") {
				all = append(all, timed{s.Name, t})
			}
		}
	}
	if len(all) == 0 {
		return
	}
	sort.SliceStable(all, func(i, j int) bool { return all[i].t.Seconds > all[j].t.Seconds })
	if len(all) > n {
		all = all[:n]
	}
	fmt.Fprintf(w, "\nslowest tests:\n")
	for _, x := range all {
		fmt.Fprintf(w, "  %7.1fs  [%s] %s %s\n", x.t.Seconds, x.stage, x.t.Package, x.t.Name)
	}
}

func clock(d time.Duration) string {
	s := int(d.Round(time.Second) / time.Second)
	return fmt.Sprintf("%d:%02d", s/60, s%60)
}

func head(s string, n int) string {
	lines := strings.SplitAfter(strings.TrimRight(s, "\n"), "\n")
	var keep []string
	for _, l := range lines {
		if strings.TrimSpace(l) == "" || framing(l) {
			continue
		}
		keep = append(keep, l)
	}
	if len(keep) > n {
		keep = append(keep[:n], fmt.Sprintf("... (%d more lines in the stage's log)\n", len(keep)-n))
	}
	return strings.Join(keep, "")
}

func logTail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(cannot read the log: %v)\n", err)
	}
	lines := strings.SplitAfter(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "")
}

func oneLine(s string, max int) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > max {
		s = s[:max] + "..."
	}
	return s
}
