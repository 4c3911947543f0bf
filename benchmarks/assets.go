package benchmarks

import _ "embed"

// GlooAllReduce is gloo_allreduce.py, the Gloo baseline, which
// Options.Python runs with PyTorch.
//
//go:embed gloo_allreduce.py
var GlooAllReduce []byte

// MPIAllReduce is mpi/allreduce.c, the OpenMPI baseline, compiled with
// mpicc at run time.
//
//go:embed mpi/allreduce.c
var MPIAllReduce []byte
