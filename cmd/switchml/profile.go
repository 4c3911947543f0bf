package main

import (
	"flag"
	"fmt"
	"os"
	"runtime/pprof"
)

// cpuProfileFlag adds --cpuprofile to fs; the returned start function begins
// profiling if asked and returns the function that stops it.
func cpuProfileFlag(fs *flag.FlagSet) func() (func(), error) {
	path := fs.String("cpuprofile", "", "write a CPU profile of this process to this file")
	return func() (func(), error) {
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
}
