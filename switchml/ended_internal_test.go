package switchml

import (
	"errors"
	"testing"

	"github.com/switchml/switchml-go/jobpb"
	"github.com/switchml/switchml-go/p4/controller/jobcore"
)

// TestEndedNamesTheCause: the words the controller gives for a session's
// end (jobcore's EndCause names) become the library's error values, so a
// caller tells them apart with errors.Is, never by the reason's words.
func TestEndedNamesTheCause(t *testing.T) {
	for _, tc := range []struct {
		cause jobcore.EndCause
		want  error
	}{
		{jobcore.EndSwitchLost, ErrSwitchLost},
		{jobcore.EndRankFailed, ErrRankFailed},
		{jobcore.EndRankLost, ErrRankLost},
		{jobcore.EndAbandoned, ErrRanksMissing},
	} {
		err := abortedBy(&jobpb.WatchEvent{Aborted: true, Cause: tc.cause.String(), Reason: "why"})
		if !errors.Is(err, ErrAborted) || !errors.Is(err, tc.want) {
			t.Errorf("ended with %s: %v, want %v and %v", tc.cause, err, ErrAborted, tc.want)
		}
	}
	if err := ended("finished", "why"); !errors.Is(err, ErrAborted) || errors.Is(err, ErrSwitchLost) || errors.Is(err, ErrRankFailed) {
		t.Errorf("an end with no cause of its own: %v", err)
	}
}
