// Package benchmarks is the benchmark suite: SwitchML against Gloo, the Go
// ring allreduce and OpenMPI, side by side in one run, on an emulated rack
// (package rack) and on loopback.
//
// Options choose the sweeps; Plan lists their points, Run runs them (one
// process per worker, a switch and a controller from internal/harness)
// and writes results.json, summary.md and PNG plots, and Report rewrites
// the summary and plots of an earlier run from its results.json. `switchml
// bench` is the command line for them; README.md here says how to run it
// and read the results.
//
// Options.RegisterFlags binds the options to `switchml bench`'s flags.
// Package benchmarks/chaos is `switchml chaos`.
//
// The package also carries the programs the suite runs besides switchml
// itself, embedded so that the switchml binary holds them, and
// WorkerReport, the JSON report each SwitchML or ring worker prints.
package benchmarks
