package p4tools

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// fakeCompiler is a toolchain whose one tool, cc, counts its runs in
// runs.log, writes out/prog.bin from its input (argument 2) into its
// folder, and fails on an input holding "bad".
func fakeCompiler(t *testing.T) (*Tools, func() int) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "p4tools-0123456789ab")
	must(t, os.MkdirAll(filepath.Join(dir, "bin"), 0o755))
	log := filepath.Join(t.TempDir(), "runs.log")
	script := "#!/bin/sh\necho run >> " + log + "\n" +
		"if grep -q bad \"$2\"; then echo \"$2:1: error: bad program\"; exit 3; fi\n" +
		"mkdir -p out/logs && tr a-z A-Z < \"$2\" > out/prog.bin && echo stage-count 7 > out/logs/summary.log\n" +
		"echo compiled \"$1\"\n"
	must(t, os.WriteFile(filepath.Join(dir, "bin", "cc"), []byte(script), 0o755))
	runs := func() int {
		b, err := os.ReadFile(log)
		if os.IsNotExist(err) {
			return 0
		}
		must(t, err)
		return strings.Count(string(b), "run\n")
	}
	return &Tools{Dir: dir}, runs
}

// workDir is a fresh folder holding the source src as prog.p4.
func workDir(t *testing.T, src string) (dir, input string) {
	t.Helper()
	dir = t.TempDir()
	input = filepath.Join(dir, "prog.p4")
	must(t, os.WriteFile(input, []byte(src), 0o644))
	return dir, input
}

func TestRunCachedRestoresARun(t *testing.T) {
	t.Setenv(EnvCompileCache, t.TempDir())
	tools, runs := fakeCompiler(t)
	ctx := context.Background()

	dir1, in1 := workDir(t, "control c {}\n")
	out, cached, err := tools.RunCached(ctx, dir1, []string{in1}, "cc", "--target", in1)
	if err != nil || cached || runs() != 1 || !strings.Contains(string(out), "compiled --target") {
		t.Fatalf("first run: cached=%v runs=%d err=%v out=%q", cached, runs(), err, out)
	}

	// The same source in another folder, named by its absolute path there:
	// restored, files and all, without a run.
	dir2, in2 := workDir(t, "control c {}\n")
	out2, cached, err := tools.RunCached(ctx, dir2, []string{in2}, "cc", "--target", in2)
	if err != nil || !cached || runs() != 1 || string(out2) != string(out) {
		t.Fatalf("second run: cached=%v runs=%d err=%v out=%q", cached, runs(), err, out2)
	}
	for _, f := range []struct{ path, want string }{{"out/prog.bin", "CONTROL C {}\n"}, {"out/logs/summary.log", "stage-count 7\n"}} {
		b, err := os.ReadFile(filepath.Join(dir2, f.path))
		if err != nil || string(b) != f.want {
			t.Errorf("restored %s: %q, %v; want %q", f.path, b, err, f.want)
		}
	}

	// The same toolchain copied to another folder (a fresh clone with
	// shared/ beside it) finds the run too.
	moved := &Tools{Dir: filepath.Join(t.TempDir(), "elsewhere")}
	must(t, copyFiles(tools.Dir, moved.Dir, nil))
	dir5, in5 := workDir(t, "control c {}\n")
	if _, cached, err := moved.RunCached(ctx, dir5, []string{in5}, "cc", "--target", in5); err != nil || !cached || runs() != 1 {
		t.Errorf("the toolchain in another folder: cached=%v runs=%d err=%v", cached, runs(), err)
	}

	// Another source, or other arguments: compiled again.
	dir3, in3 := workDir(t, "control d {}\n")
	if _, cached, err := tools.RunCached(ctx, dir3, []string{in3}, "cc", "--target", in3); err != nil || cached || runs() != 2 {
		t.Errorf("changed source: cached=%v runs=%d err=%v", cached, runs(), err)
	}
	dir4, in4 := workDir(t, "control c {}\n")
	if _, cached, err := tools.RunCached(ctx, dir4, []string{in4}, "cc", "--other", in4); err != nil || cached || runs() != 3 {
		t.Errorf("changed arguments: cached=%v runs=%d err=%v", cached, runs(), err)
	}
}

func TestRunCachedKeepsAFailure(t *testing.T) {
	t.Setenv(EnvCompileCache, t.TempDir())
	tools, runs := fakeCompiler(t)
	for i := 1; i <= 2; i++ {
		dir, in := workDir(t, "bad\n")
		out, cached, err := tools.RunCached(context.Background(), dir, []string{in}, "cc", "-x", in)
		if err == nil || !strings.Contains(err.Error(), "exit status 3") || !strings.Contains(string(out), "error: bad program") {
			t.Fatalf("run %d: err=%v out=%q; want the compiler's failure", i, err, out)
		}
		if cached != (i == 2) || runs() != 1 {
			t.Errorf("run %d: cached=%v runs=%d; want the second restored", i, cached, runs())
		}
	}
}

func TestRunCachedOff(t *testing.T) {
	t.Setenv(EnvCompileCache, "off")
	tools, runs := fakeCompiler(t)
	for i := 1; i <= 2; i++ {
		dir, in := workDir(t, "control c {}\n")
		if _, cached, err := tools.RunCached(context.Background(), dir, []string{in}, "cc", "-x", in); err != nil || cached || runs() != i {
			t.Errorf("run %d with the cache off: cached=%v runs=%d err=%v", i, cached, runs(), err)
		}
	}
}

func TestPruneKeepsTheNewest(t *testing.T) {
	root := t.TempDir()
	for i, name := range []string{"a", "b", "c", "d"} {
		must(t, os.MkdirAll(filepath.Join(root, name), 0o755))
		when := filepath.Join(root, name)
		st, err := os.Stat(when)
		must(t, err)
		mt := st.ModTime().Add(-time.Duration(i) * time.Hour)
		must(t, os.Chtimes(when, mt, mt))
	}
	prune(root, 2)
	ents, err := os.ReadDir(root)
	must(t, err)
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	if strings.Join(names, ",") != "a,b" {
		t.Errorf("after pruning to 2: %v, want the two newest, a and b", names)
	}
}
