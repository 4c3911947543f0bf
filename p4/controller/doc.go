// Package controller is the SwitchML controller: it programs a switch
// (the software switch, BMv2 or a Tofino with the matching program, or a
// tree of them) through its P4Runtime client (package p4rt), and serves
// the job service workers register with (jobpb.JobService).
//
// The job service is a deterministic core (package jobcore: jobs,
// partitions, leases, rounds, adoption, the split of a job over a tree;
// no I/O, goroutines or clock) driven by JobService, which serves the
// RPCs, hands the core's placements to the switch (Switch, a p4rt.Client
// or a Tree) and feeds it the switch's reports and the time. Run is the
// daemon: it connects to the switch, serves the job service and reconnects
// when the switch is lost. What operators see, the Status RPC and the
// Prometheus collector (JobService.Collector), is a snapshot the core
// hands over under the driver's lock; the switch's counters are read
// after, outside it.
//
// While another controller holds primaryship of the switch, jobs fail
// with that cause and Status reports it (control.go).
package controller
