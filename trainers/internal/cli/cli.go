// Package cli holds the command-line conventions the trainers' commands
// share with the switchml command: --help lists every flag as --name and
// exits 0, a usage error exits 2 with a short message, and any other
// failure exits 1.
package cli

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/switchml/switchml-go/internal/flagusage"
)

// UsageError is a command line the command cannot run: an unknown or
// malformed flag, a missing argument, a stray one. Its message is short;
// the command's --help says the rest.
type UsageError struct {
	// Command is the command (with its subcommand) whose --help to read.
	Command string
	Err     error
}

func (e *UsageError) Error() string { return e.Err.Error() }

func (e *UsageError) Unwrap() error { return e.Err }

// Usagef returns a *UsageError of command with the formatted message.
func Usagef(command, format string, a ...any) error {
	return &UsageError{Command: command, Err: fmt.Errorf(format, a...)}
}

// Usage marks err, from checking command's flags, as a usage error; it
// returns nil and flag.ErrHelp as they are.
func Usage(command string, err error) error {
	if err == nil || errors.Is(err, flag.ErrHelp) {
		return err
	}
	var ue *UsageError
	if errors.As(err, &ue) {
		return err
	}
	return &UsageError{Command: command, Err: err}
}

// Exit status of a command, as the switchml command uses them.
const (
	ExitOK    = 0
	ExitFail  = 1
	ExitUsage = 2
)

// Status writes err for the user on stderr, prefixed with the command's
// name, and returns the exit status: ExitOK for nil and flag.ErrHelp,
// ExitUsage for a *UsageError (with where to read the flags), ExitFail
// for anything else.
func Status(name string, err error, stderr io.Writer) int {
	var ue *UsageError
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return ExitOK
	case errors.As(err, &ue):
		cmd := ue.Command
		if cmd == "" {
			cmd = name
		}
		fmt.Fprintf(stderr, "%s: %v\nRun '%s --help' for usage.\n", name, ue.Err, cmd)
		return ExitUsage
	}
	msg := err.Error()
	if !strings.HasPrefix(msg, name+":") {
		msg = name + ": " + msg
	}
	fmt.Fprintln(stderr, msg)
	return ExitFail
}

// Exit ends the process with Status(name, err, os.Stderr).
func Exit(name string, err error) {
	os.Exit(Status(name, err, os.Stderr))
}

// NewFlagSet returns a flag set whose errors are returned, not fatal, and
// whose help, on standard output, reads
//
//	Usage: <name> <synopsis>
//
//	<summary>
//
//	Flags:
//	  --flag ...
func NewFlagSet(name, synopsis, summary string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(os.Stdout)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: %s %s\n\n%s\n\nFlags:\n", name, synopsis, summary)
		flagusage.Print(fs)
	}
	return fs
}

// Parse parses args, which hold flags only. --help prints the help and
// returns flag.ErrHelp; a bad flag or a stray argument returns a
// *UsageError, without the help.
func Parse(fs *flag.FlagSet, args []string) error {
	if err := ParseArgs(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return Usagef(fs.Name(), "unexpected arguments %q: every setting is a flag", fs.Args())
	}
	return nil
}

// ParseArgs is Parse for a command that takes arguments after its flags
// (fs.Args).
func ParseArgs(fs *flag.FlagSet, args []string) error {
	out := fs.Output()
	var buf bytes.Buffer
	fs.SetOutput(&buf)
	err := fs.Parse(args)
	fs.SetOutput(out)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, flag.ErrHelp):
		_, werr := buf.WriteTo(out)
		return errors.Join(err, werr)
	}
	return Usagef(fs.Name(), "%v", err)
}

// CommandLine is the command that reproduces a run: prefix (such as
// "go run ./cmd/density") and the arguments, quoted where a shell needs it.
func CommandLine(prefix string, args []string) string {
	parts := []string{prefix}
	for _, a := range args {
		if a == "" || strings.ContainsAny(a, " \t\"'$") {
			a = strconv.Quote(a)
		}
		parts = append(parts, a)
	}
	return strings.Join(parts, " ")
}

// PerModel parses a flag of model=N pairs separated by commas (such as
// "lstm=5,bert=2"), each N at least least; an empty value is an empty map.
// The usage error names command, the flag and what it wants.
func PerModel(command, flagName, value, what string, least int) (map[string]int, error) {
	out := map[string]int{}
	if value == "" {
		return out, nil
	}
	for _, kv := range strings.Split(value, ",") {
		m, v, ok := strings.Cut(kv, "=")
		n, err := strconv.Atoi(v)
		if !ok || err != nil || n < least || strings.TrimSpace(m) == "" {
			return nil, Usagef(command, "--%s %q: want model=%s pairs separated by commas, each at least %d, e.g. bert=%d", flagName, value, what, least, least+1)
		}
		out[strings.TrimSpace(m)] = n
	}
	return out, nil
}
