package field

import (
	"errors"
	"fmt"
	"io/fs"
	"testing"
)

// TestNamedWritesFieldsAsGiven: a refusal names its fields as they are,
// or as a caller names them, inside joins and behind context, and its
// cause stays reachable.
func TestNamedWritesFieldsAsGiven(t *testing.T) {
	cause := fs.ErrNotExist
	err := errors.Join(
		Errorf("{Slots} %d: want 1..%d", -5, 8),
		fmt.Errorf("leaf0: %w", Errorf("{DeviceConfigFile} %s: %w", "/x{Slots}", cause)),
	)
	if got, want := err.Error(), "Slots -5: want 1..8\nleaf0: DeviceConfigFile /x{Slots}: "+cause.Error(); got != want {
		t.Errorf("as fields: %q, want %q", got, want)
	}
	named := Named(err, Flags(map[string]string{"Slots": "slots", "DeviceConfigFile": "device-config"}))
	if got, want := named.Error(), "--slots -5: want 1..8\nleaf0: --device-config /x{Slots}: "+cause.Error(); got != want {
		t.Errorf("as flags: %q, want %q", got, want)
	}
	var fe *Error
	if !errors.As(named, &fe) || len(fe.Fields) != 1 || fe.Field() != "Slots" || !errors.Is(named, cause) {
		t.Errorf("through Named: Error %+v, cause found %v", fe, errors.Is(named, cause))
	}
	if Named(nil, nil) != nil {
		t.Error("Named(nil) is not nil")
	}
}

// TestInvalidStatesTheValue: Invalid names the field and its value (or
// says it is empty), and an owner's errors qualify the names the caller
// leaves alone.
func TestInvalidStatesTheValue(t *testing.T) {
	for _, tc := range []struct {
		err        *Error
		plain, got string
	}{
		{Invalid("Rank", 4, "want 0 <= rank < {Workers} (%d)", 4), "Rank = 4: want 0 <= rank < Workers (4)", "--rank = 4: want 0 <= rank < Workers (4)"},
		{Invalid("Job", "", "name the job"), "Job is empty: name the job", "Job is empty: name the job"},
		{Invalid("Faults.Drop", 1.5, "want [0, 1]"), "Faults.Drop = 1.5: want [0, 1]", "--drop = 1.5: want [0, 1]"},
		{Owner("Config").Errorf("give them in {FallbackPeers} or {Rank}"), "give them in Config.FallbackPeers or Config.Rank", "give them in Config.FallbackPeers or --rank"},
		{Errorf("{Target} %q: 100%% wrong", "a%b"), `Target "a%b": 100% wrong`, `Target "a%b": 100% wrong`},
	} {
		flags := Flags(map[string]string{"Rank": "rank", "Faults.Drop": "drop"})
		if tc.err.Error() != tc.plain || tc.err.Text(flags) != tc.got {
			t.Errorf("%q / %q, want %q / %q", tc.err.Error(), tc.err.Text(flags), tc.plain, tc.got)
		}
	}
	if e := Invalid("Rank", 4, "x"); e.Value != 4 || e.Field() != "Rank" {
		t.Errorf("Invalid: value %v field %q", e.Value, e.Field())
	}
}
