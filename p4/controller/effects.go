package controller

// The driver's side of the job core's effects: what a job's placement is in
// P4Runtime entries, and back; and the core's refusals for the driver's own
// checks (the target's, the topology's).

import (
	"github.com/switchml/switchml-go/p4/controller/jobcore"
	"github.com/switchml/switchml-go/p4/switchjob"
	"google.golang.org/grpc/codes"
)

// invalid and refuse make refusals as the core does: their gRPC code tells
// a client how to take them.
func invalid(format string, args ...any) error { return jobcore.Invalid(format, args...) }

func refuse(code codes.Code, format string, args ...any) error {
	return jobcore.Refuse(code, format, args...)
}

// entriesOf is what the switch holds for a job the core placed.
func entriesOf(p jobcore.Placement) JobEntries {
	j := JobEntries{MulticastGroup: p.Group, Key: p.Key}
	for _, w := range p.Workers {
		j.Workers = append(j.Workers, WorkerEntry{Addr: w.Addr, Worker: switchjob.Worker{
			JobID: p.JobID, Rank: w.Rank, NumWorkers: uint16(p.World), MulticastGroup: p.Group,
			Lane: w.Lane, PoolBase: p.PoolBase, PoolSize: p.PoolSize,
		}})
	}
	for _, r := range p.Replies {
		j.Replies = append(j.Replies, ReplyEntry{JobID: p.JobID, Rank: r.Rank, Lane: r.Lane, MAC: r.MAC, Addr: r.Addr})
	}
	for _, m := range p.Members {
		j.Replicas = append(j.Replicas, Replica{Port: m.Port, Instance: m.Rank})
	}
	return j
}

// placementsOf groups the entries read back from a switch by switch job
// id, in the order the workers came: a job's partition, group and world
// are those of its first worker entry.
func placementsOf(workers []WorkerEntry, replies []ReplyEntry, groups map[uint16][]Replica) []jobcore.Placement {
	var out []jobcore.Placement
	at := map[uint32]int{}
	for _, w := range workers {
		i, ok := at[w.JobID]
		if !ok {
			i = len(out)
			at[w.JobID] = i
			p := jobcore.Placement{JobID: w.JobID, PoolBase: w.PoolBase, PoolSize: w.PoolSize, Group: w.MulticastGroup, World: int(w.NumWorkers)}
			for _, r := range groups[w.MulticastGroup] {
				p.Members = append(p.Members, jobcore.Member{Port: r.Port, Rank: r.Instance})
			}
			out = append(out, p)
		}
		out[i].Workers = append(out[i].Workers, jobcore.Lane{Rank: w.Rank, Lane: w.Lane, Addr: w.Addr})
	}
	for _, r := range replies {
		if i, ok := at[r.JobID]; ok {
			out[i].Replies = append(out[i].Replies, jobcore.Lane{Rank: r.Rank, Lane: r.Lane, Addr: r.Addr, MAC: r.MAC})
		}
	}
	return out
}
