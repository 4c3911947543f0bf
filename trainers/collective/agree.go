package collective

import (
	"errors"
	"fmt"
	"strings"
)

// Setting is one value every rank of a job must share, named as the user
// sets it (a flag such as "--seed", or a description such as "training
// data"), so that a disagreement reads as what to change.
type Setting struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

// ErrDisagree tells that the ranks of a job were started with different
// settings; the error it wraps lists each difference.
var ErrDisagree = errors.New("ranks disagree on the job")

// maxDifferences bounds the report: past a handful the ranks were clearly
// started from different command lines, and the first ones say so.
const maxDifferences = 12

// CheckAgreement compares every rank's settings (indexed by rank) with rank
// 0's and returns nil when they all match, else an error wrapping
// ErrDisagree that names each difference with both values. Every rank gets
// the same lists from a rendezvous, so every rank reports the same error.
func CheckAgreement(all [][]Setting) error {
	if len(all) == 0 {
		return nil
	}
	ref := all[0]
	var diffs []string
	for r := 1; r < len(all); r++ {
		mine := make(map[string]string, len(all[r]))
		for _, s := range all[r] {
			mine[s.Name] = s.Value
		}
		for _, s := range ref {
			v, ok := mine[s.Name]
			switch {
			case !ok:
				diffs = append(diffs, fmt.Sprintf("rank %d does not report %s (rank 0 has %s %s): is it running another version of the program?", r, s.Name, s.Name, s.Value))
			case v != s.Value:
				diffs = append(diffs, fmt.Sprintf("rank %d has %s %s, rank 0 has %s %s", r, s.Name, v, s.Name, s.Value))
			}
			delete(mine, s.Name)
		}
		for _, s := range all[r] {
			if _, extra := mine[s.Name]; extra {
				diffs = append(diffs, fmt.Sprintf("rank %d reports %s %s, which rank 0 does not: is it running another version of the program?", r, s.Name, s.Value))
			}
		}
	}
	if len(diffs) == 0 {
		return nil
	}
	more := ""
	if len(diffs) > maxDifferences {
		more = fmt.Sprintf("\n  ... and %d more", len(diffs)-maxDifferences)
		diffs = diffs[:maxDifferences]
	}
	return fmt.Errorf("%w: start every rank with the same settings and data:\n  %s%s", ErrDisagree, strings.Join(diffs, "\n  "), more)
}
