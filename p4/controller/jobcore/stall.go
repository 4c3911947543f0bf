package jobcore

// A rank that gives up on the switch (no answer for its give-up time) may
// have lost the switch, or a peer of it may have stopped sending: the
// slots the peer did not contribute to wait for it, and no result comes.
// The driver asks the switch which ranks the job's waiting slots lack
// (Stall), and the core words the job's end by it (Abort).

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
)

// Partition is where a job sits in the pool, for the driver to ask the
// switch about its slots.
type Partition struct {
	Job               string
	Base, Size, World int
}

// Stall is what the driver learned from the switch about a job a rank gave
// up on: whether it asked, whether the switch answered, and which ranks
// the job's waiting slots lack (rank: slots).
type Stall struct {
	Asked    bool
	Answered bool
	Missing  map[int]int
}

// stalled describes the ranks the verdict found missing, or "" when it
// found none (or could not ask).
func (v Stall) stalled() (who string, slots int) {
	if !v.Answered || len(v.Missing) == 0 {
		return "", 0
	}
	ranks := slices.Sorted(maps.Keys(v.Missing))
	words := make([]string, len(ranks))
	for i, r := range ranks {
		words[i] = strconv.Itoa(r)
		slots = max(slots, v.Missing[r])
	}
	if len(ranks) == 1 {
		return "rank " + words[0], slots
	}
	return "ranks " + strings.Join(words, ", "), slots
}

// stalledCause words the end of a job whose waiting slots lack who.
func stalledCause(who string, slots, giver int, reason string) string {
	return fmt.Sprintf("aborted: %s stopped sending: the switch answers and holds %d of the job's slots waiting for it (rank %d gave up waiting: %s)",
		who, slots, giver, reason)
}
