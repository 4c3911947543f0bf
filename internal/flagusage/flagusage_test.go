package flagusage

import (
	"bytes"
	"flag"
	"regexp"
	"strings"
	"testing"
	"time"
)

func TestPrintListsDoubleDashWithDefaults(t *testing.T) {
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	var out bytes.Buffer
	fs.SetOutput(&out)
	fs.String("controller", "127.0.0.1:50051", "the `address` of the controller")
	fs.String("token", "", "the job's token")
	fs.Int("workers", 4, "ranks")
	fs.Bool("verify", false, "check the sums")
	fs.Duration("wait", 2*time.Second, "how long")
	Print(fs)
	got := out.String()
	for _, want := range []string{
		"  --controller address\n    \tthe address of the controller (default \"127.0.0.1:50051\")\n",
		"  --token string\n    \tthe job's token\n",
		"  --workers int\n    \tranks (default 4)\n",
		"  --verify\n    \tcheck the sums\n",
		"  --wait duration\n    \thow long (default 2s)\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("missing %q in:\n%s", want, got)
		}
	}
	if regexp.MustCompile(`(?m)^  -[^-]`).MatchString(got) {
		t.Errorf("a flag listed with one dash:\n%s", got)
	}
}
