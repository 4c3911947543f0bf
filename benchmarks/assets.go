package benchmarks

import _ "embed"

// TorchAllReduce is torch_allreduce.py, which Options.Python runs with
// PyTorch: the Gloo baseline, and with --backend switchml the
// torch-switchml system.
//
//go:embed torch_allreduce.py
var TorchAllReduce []byte

// MPIAllReduce is mpi/allreduce.c, the OpenMPI baseline, compiled with
// mpicc at run time.
//
//go:embed mpi/allreduce.c
var MPIAllReduce []byte
