package switchml

import (
	"errors"
	"fmt"
	"testing"

	"github.com/switchml/switchml-go/field"
)

// A controller's refusal that names this worker's settings reads as it
// came, and a program that sets them from flags writes its flags.
func TestAnswerNamesTheWorkersSettings(t *testing.T) {
	msg := `job "a%b" has no token: give every rank the same secret token (switchml.Config.Token), and bind (switchml.Config.Bind)`
	err := fmt.Errorf("%w: join: %w", ErrJobMismatch, answer(msg))
	if want := ErrJobMismatch.Error() + ": join: " + msg; err.Error() != want {
		t.Errorf("answer's text: %q, want %q", err.Error(), want)
	}
	flags := field.Flags(map[string]string{"Token": "token", "Bind": "bind"})
	got := field.Named(err, flags).Error()
	want := ErrJobMismatch.Error() + `: join: job "a%b" has no token: give every rank the same secret token (--token), and bind (--bind)`
	if got != want {
		t.Errorf("named: %q, want %q", got, want)
	}
	if !errors.Is(field.Named(err, flags), ErrJobMismatch) {
		t.Error("naming lost the cause")
	}
	if a := answer("no settings here"); a.Error() != "no settings here" {
		t.Errorf("plain answer: %q", a)
	}
}
