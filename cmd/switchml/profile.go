package main

import (
	"flag"
	"fmt"
	"os"
	"runtime/pprof"
)

// parseFlagsProfiled adds --cpuprofile to fs, parses args and, if a profile
// was asked for, starts it; the caller defers the returned stop.
func parseFlagsProfiled(fs *flag.FlagSet, args []string) (stop func(), err error) {
	path := fs.String("cpuprofile", "", "write a CPU profile of this process to this file")
	if err := parseFlags(fs, args); err != nil {
		return nil, err
	}
	if *path == "" {
		return func() {}, nil
	}
	f, err := os.Create(*path)
	if err != nil {
		return nil, fmt.Errorf("--cpuprofile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("--cpuprofile: %w", err)
	}
	return func() { pprof.StopCPUProfile(); f.Close() }, nil
}
