// Package benchmarks holds the programs the benchmark suite runs besides
// switchml itself, embedded so that the switchml binary carries them: the
// Gloo baseline (gloo_allreduce.py, run by /usr/bin/python3 with PyTorch) and
// the OpenMPI baseline (mpi/allreduce.c, compiled with mpicc at run time).
//
// The suite is `switchml bench`; see README.md here. The emulated rack it
// builds is package rack.
package benchmarks

import _ "embed"

// GlooAllReduce is gloo_allreduce.py.
//
//go:embed gloo_allreduce.py
var GlooAllReduce []byte

// MPIAllReduce is mpi/allreduce.c.
//
//go:embed mpi/allreduce.c
var MPIAllReduce []byte
