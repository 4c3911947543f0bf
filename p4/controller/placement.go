package controller

// The driver's side of the core's placements: what a job's place on the
// switch is in P4Runtime entries, and back.

import (
	"github.com/switchml/switchml-go/p4/pipeline"
)

// entriesOf is what the switch holds for a job the core placed.
func entriesOf(p Placement) JobEntries {
	j := JobEntries{MulticastGroup: p.Group}
	if p.Key != nil {
		j.Key = AuthKey(p.Key)
	}
	for _, w := range p.Workers {
		j.Workers = append(j.Workers, WorkerEntry{Addr: w.Addr, Worker: pipeline.Worker{
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
func placementsOf(workers []WorkerEntry, replies []ReplyEntry, groups map[uint16][]Replica) []Placement {
	var out []Placement
	at := map[uint32]int{}
	for _, w := range workers {
		i, ok := at[w.JobID]
		if !ok {
			i = len(out)
			at[w.JobID] = i
			p := Placement{JobID: w.JobID, PoolBase: w.PoolBase, PoolSize: w.PoolSize, Group: w.MulticastGroup, World: int(w.NumWorkers)}
			for _, r := range groups[w.MulticastGroup] {
				p.Members = append(p.Members, Member{Port: r.Port, Rank: r.Instance})
			}
			out = append(out, p)
		}
		out[i].Workers = append(out[i].Workers, Lane{Rank: w.Rank, Lane: w.Lane, Addr: w.Addr})
	}
	for _, r := range replies {
		if i, ok := at[r.JobID]; ok {
			out[i].Replies = append(out[i].Replies, Lane{Rank: r.Rank, Lane: r.Lane, Addr: r.Addr, MAC: r.MAC})
		}
	}
	return out
}
