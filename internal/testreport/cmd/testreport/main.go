// Command testreport is scripts/test.sh's reporter:
//
//	go test -json ./... | testreport go OUT.results.json
//	testreport junit REPORT.xml OUT.results.json
//	testreport summary RUNDIR SECONDS
//
// "go" echoes a short log of a go test -json stream and keeps its tests'
// outcomes; "junit" does the same for pytest's JUnit XML; "summary" prints
// the run's summary (stages, failures, skips) and exits 1 if anything
// failed.
package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strconv"
	"time"

	"github.com/switchml/switchml-go/internal/testreport"
)

const usage = `usage:
  go test -json PKGS | testreport go OUT.results.json
  testreport junit REPORT.xml OUT.results.json
  testreport summary RUNDIR SECONDS`

func main() {
	if err := run(os.Args[1:], os.Stdin, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "testreport:", err)
		os.Exit(2)
	}
}

func run(args []string, stdin io.Reader, stdout io.Writer) error {
	if len(args) == 0 {
		return fmt.Errorf("no command\n%s", usage)
	}
	switch cmd, rest := args[0], args[1:]; {
	case cmd == "go" && len(rest) == 1:
		res, err := testreport.ReadGoJSON(stdin, stdout)
		if werr := save(rest[0], res); err == nil {
			err = werr
		}
		return err
	case cmd == "junit" && len(rest) == 2:
		f, err := os.Open(rest[0])
		if err != nil {
			return err
		}
		defer f.Close()
		res, err := testreport.ReadJUnit(f)
		if err != nil {
			return err
		}
		return save(rest[1], res)
	case cmd == "summary" && len(rest) == 2:
		secs, err := strconv.ParseFloat(rest[1], 64)
		if err != nil {
			return fmt.Errorf("summary: seconds %q: %v", rest[1], err)
		}
		stages, err := testreport.ReadRun(rest[0])
		if err != nil {
			return err
		}
		testreport.WriteSummary(stdout, stages, time.Duration(secs*float64(time.Second)))
		if testreport.RunFailed(stages) {
			os.Exit(1)
		}
		return nil
	}
	return fmt.Errorf("bad arguments %q\n%s", args, usage)
}

func save(path string, res *testreport.Results) error {
	if res == nil {
		res = &testreport.Results{}
	}
	b, err := json.MarshalIndent(res, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}
