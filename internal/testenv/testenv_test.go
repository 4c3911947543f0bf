package testenv

import "testing"

// TestNeedCommands skips for a missing command, naming it and how to get
// it, and lets a test with its commands run on.
func TestNeedCommands(t *testing.T) {
	var missing, present *testing.T
	t.Run("missing", func(t *testing.T) {
		missing = t
		NeedCommands(t, "sh", "switchml-no-such-command")
	})
	t.Run("present", func(t *testing.T) {
		present = t
		NeedCommands(t, "sh")
	})
	if !missing.Skipped() || present.Skipped() {
		t.Fatalf("skipped: with a missing command %v, with sh alone %v; want true, false", missing.Skipped(), present.Skipped())
	}
}
