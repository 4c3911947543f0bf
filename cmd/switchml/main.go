// Command switchml runs every part of SwitchML: the software switch, the
// controller, one worker of an allreduce job, a one-command local demo and
// the benchmark suite, and beside them the ring allreduce baseline, a chaos
// run, throwaway TLS certificates and the P4 toolchain's environment.
//
//	switchml demo --workers 4
//	switchml <command> --help
//
// Each command parses its flags and calls the package that does the work:
// allreduce package switchml, switch and controller the packages under
// p4/, status jobpb, bench, demo and ring package benchmarks, chaos
// benchmarks/chaos. Errors in a worker's configuration name the flag to
// change, not the library's Config field.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"os/signal"
	"slices"
	"syscall"

	"github.com/switchml/switchml-go/internal/flagusage"
)

type command struct {
	summary string
	run     func(ctx context.Context, args []string) error
}

var commands = map[string]command{}

func register(name, summary string, run func(ctx context.Context, args []string) error) {
	commands[name] = command{summary: summary, run: run}
}

func usage(w io.Writer) {
	fmt.Fprintf(w, "switchml: in-network aggregation for distributed training\n\nUsage: switchml <command> [flags]\n\nCommands:\n")
	for _, n := range slices.Sorted(maps.Keys(commands)) {
		fmt.Fprintf(w, "  %-11s %s\n", n, commands[n].summary)
	}
	fmt.Fprintf(w, "\nRun 'switchml <command> --help' for the flags of a command, 'switchml --version' for the build.\n")
}

// errUsage marks errors whose message already told the user what to do.
var errUsage = errors.New("usage")

func main() {
	if len(os.Args) == 2 && (os.Args[1] == "--version" || os.Args[1] == "-version" || os.Args[1] == "version") {
		fmt.Println(version())
		return
	}
	if len(os.Args) < 2 || os.Args[1] == "-h" || os.Args[1] == "--help" || os.Args[1] == "help" {
		usage(os.Stdout)
		if len(os.Args) < 2 {
			os.Exit(2)
		}
		return
	}
	cmd, ok := commands[os.Args[1]]
	if !ok {
		fmt.Fprintf(os.Stderr, "switchml: unknown command %q\n\n", os.Args[1])
		usage(os.Stderr)
		os.Exit(2)
	}
	// The first SIGINT or SIGTERM cancels the command's context: it winds
	// down, telling the controller and its peers that it was interrupted.
	// A second one ends the process at once.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		<-ctx.Done()
		stop()
	}()
	if err := cmd.run(ctx, os.Args[2:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return
		}
		if ctx.Err() != nil {
			fmt.Fprintf(os.Stderr, "switchml %s: interrupted: %s\n", os.Args[1], termLines(err.Error()))
			os.Exit(exitInterrupted)
		}
		if !errors.Is(err, errUsage) {
			fmt.Fprintf(os.Stderr, "switchml %s: %s\n", os.Args[1], termLines(err.Error()))
		}
		os.Exit(1)
	}
}

// exitInterrupted is the exit status of a command stopped by SIGINT or
// SIGTERM, as shells give a process that a SIGINT ended.
const exitInterrupted = 130

// newFlags returns a flag set whose errors are returned, not fatal.
func newFlags(name, synopsis string) *flag.FlagSet {
	fs := flag.NewFlagSet("switchml "+name, flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: switchml %s %s\n\n%s\n\nFlags:\n", name, synopsis, commands[name].summary)
		flagusage.Print(fs)
	}
	return fs
}

// parseFlags parses args and rejects stray positional arguments.
func parseFlags(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return errUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(fs.Output(), "unexpected arguments: %v\n", fs.Args())
		fs.Usage()
		return errUsage
	}
	return nil
}

func newLogger(level string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("bad --log-level %q: want debug, info, warn or error", level)
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: l})), nil
}
