// Package switchml is the worker side of SwitchML, in-network aggregation
// for data-parallel training: an allreduce whose sum is computed by a
// switch (a P4 switch, or the software switch of this module) as the
// workers' packets stream through it.
//
// A worker joins a job through the controller (Join, with the controller's
// address, the job name, its rank and the world size) and then sums
// []float32, []int32 or float16/bfloat16 bits in place across all ranks
// (AllReduceFloat32 and friends, or the Start* variants that return a
// Handle); AllReduce and Start take any type of package dtype's registry,
// as the tensor's bytes, and package switchml/tensor sums gorgonia dense
// tensors. Floats travel as
// block-scaled 32-bit fixed point with a per-block exponent shared through
// the switch (package quant); int32 is summed exactly, wrapping.
//
// Every rank must issue the same calls in the same order. A rank that dies,
// loses the controller or fails a call ends the job for every rank with
// ErrAborted and the cause; the switch not answering ends a call with
// ErrTimeoutBudget after Config.GiveUp.
//
// Join refuses a bad Config before it contacts anyone, with a *ConfigError
// that names each invalid field, its value and what to set instead;
// Config.Validate runs the same checks ahead of time, and a command that
// sets a Config from flags restates the error in its flags with InFlags.
//
// To watch a job, register Session.Collector with a Prometheus registry
// (allreduce durations, packets, bytes, retransmissions, timeouts, round
// trips), and set Config.Trace to write the session's timeline as Chrome
// trace-event JSON when it closes: a span per allreduce call and per lane,
// retransmission bursts, and waits for the slowest peer.
//
// The switch side lives under p4/: the software switch, the controller that
// programs a switch and runs the job service, and the P4 programs. Package
// p4/local runs a software switch and a controller inside the process,
// which the examples use; cmd/switchml runs each part as a command.
package switchml
