package controller

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
		refuseField("{Slots} %d: want 1..%d", -5, 8),
		fmt.Errorf("leaf0: %w", refuseField("{DeviceConfigFile} %s: %w", "/x{Slots}", cause)),
	)
	if got, want := err.Error(), "Slots -5: want 1..8\nleaf0: DeviceConfigFile /x{Slots}: "+cause.Error(); got != want {
		t.Errorf("as fields: %q, want %q", got, want)
	}
	flags := map[string]string{"Slots": "--slots", "DeviceConfigFile": "--device-config"}
	named := Named(err, func(f string) string { return flags[f] })
	if got, want := named.Error(), "--slots -5: want 1..8\nleaf0: --device-config /x{Slots}: "+cause.Error(); got != want {
		t.Errorf("as flags: %q, want %q", got, want)
	}
	var fe *FieldError
	if !errors.As(named, &fe) || len(fe.Fields) != 1 || fe.Fields[0] != "Slots" || !errors.Is(named, cause) {
		t.Errorf("through Named: FieldError %+v, cause found %v", fe, errors.Is(named, cause))
	}
	if Named(nil, nil) != nil {
		t.Error("Named(nil) is not nil")
	}
}
