package main

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"google.golang.org/grpc"

	"github.com/switchml/switchml-go/jobpb"
)

// pagedStatus answers Status from pages of jobs, as a controller with a
// large job table does.
type pagedStatus struct {
	jobpb.JobServiceClient // other methods are not called
	pages                  [][]*jobpb.JobStatus
	reqs                   []*jobpb.StatusRequest
}

func (p *pagedStatus) Status(_ context.Context, req *jobpb.StatusRequest, _ ...grpc.CallOption) (*jobpb.StatusResponse, error) {
	p.reqs = append(p.reqs, req)
	i := 0
	if req.GetPageToken() != "" {
		if _, err := fmt.Sscanf(req.GetPageToken(), "page%d", &i); err != nil {
			return nil, err
		}
	}
	st := &jobpb.StatusResponse{TargetKind: "softswitch", Slots: 512, Jobs: p.pages[i]}
	if i+1 < len(p.pages) {
		st.NextPageToken = fmt.Sprintf("page%d", i+1)
	}
	return st, nil
}

func TestFetchStatusFollowsPages(t *testing.T) {
	c := &pagedStatus{pages: [][]*jobpb.JobStatus{{{Name: "a"}, {Name: "b"}}, {{Name: "c"}}, {{Name: "d"}}}}
	st, err := fetchStatus(context.Background(), c, false)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, j := range st.GetJobs() {
		names = append(names, j.GetName())
	}
	if strings.Join(names, ",") != "a,b,c,d" || st.GetNextPageToken() != "" || st.GetSlots() != 512 {
		t.Errorf("got jobs %v, next page %q, slots %d; want a,b,c,d, none, 512", names, st.GetNextPageToken(), st.GetSlots())
	}
	if len(c.reqs) != 3 || c.reqs[0].GetSkipSwitchCounters() || !c.reqs[1].GetSkipSwitchCounters() || c.reqs[2].GetPageToken() != "page2" {
		t.Errorf("requests %v: want 3, counters read on the first page only", c.reqs)
	}

	// A job table that never ends is an error, not a loop.
	endless := make([][]*jobpb.JobStatus, statusPagesMax+1)
	if _, err := fetchStatus(context.Background(), &pagedStatus{pages: endless}, true); err == nil || !strings.Contains(err.Error(), "did not end") {
		t.Errorf("an endless job table: %v", err)
	}
}

func TestWriteStatusText(t *testing.T) {
	st := &jobpb.StatusResponse{
		TargetKind: "softswitch", Dataplane: "127.0.0.1:48864", Slots: 512, SlotsInUse: 64,
		Jobs: []*jobpb.JobStatus{
			{Name: "train", State: "active", WorldSize: 2, Lanes: 2, Window: 16, PacketElements: 256, JobId: 3, PoolBase: 32, PoolSize: 32, AgeSeconds: 61.4,
				Ranks: []*jobpb.RankStatus{{Rank: 0, LaneAddresses: []string{"127.0.0.1:4000", "127.0.0.1:4001"}, Leased: true}, {Rank: 1, Left: true}}, RanksOmitted: 5},
			{State: "unclaimed"},
		},
		SwitchCounters: []*jobpb.SwitchCounter{{Name: "received", Packets: 1234}, {Name: "multicast", Packets: 56}},
		Ended:          map[string]uint64{"finished": 3, "rank_lost": 1, "abandoned": 0},
		Redacted:       true,
	}
	var b strings.Builder
	if err := writeStatusText(&b, "127.0.0.1:50051", st); err != nil {
		t.Fatal(err)
	}
	// Columns are aligned with spaces: compare with each run of them as one.
	out := regexp.MustCompile(` +`).ReplaceAllString(b.String(), " ")
	for _, want := range []string{
		"controller 127.0.0.1:50051: softswitch switch, data plane 127.0.0.1:48864; 64 of 512 slots per set in use\n",
		"redacted: this certificate is not an operator's",
		"\ntrain active 2/2 2 x 16 256 32-63 (32) 3 1m1s\n",
		"\n(unclaimed) unclaimed 0/0 0 x 0 0 - - -\n",
		"\ntrain 0 held 127.0.0.1:4000 127.0.0.1:4001\n",
		"\ntrain 1 left \n",
		"\ntrain (5 more) \n",
		"\n received 1234\n",
		"\n multicast 56\n",
		"\njobs ended since the controller started: finished 3, rank_lost 1\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("status lacks %q:\n%s", want, out)
		}
	}
	for _, never := range []string{"switch offline", "control lost", "abandoned"} {
		if strings.Contains(out, never) {
			t.Errorf("status says %q:\n%s", never, out)
		}
	}

	b.Reset()
	if err := writeStatusText(&b, "c", &jobpb.StatusResponse{Offline: "no answer at 127.0.0.1:9559", SwitchCountersError: "not primary"}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"switch offline: no answer at 127.0.0.1:9559\n", "no jobs\n", "switch counters: not primary\n"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("status lacks %q:\n%s", want, b.String())
		}
	}
	if strings.Contains(b.String(), "jobs ended") {
		t.Errorf("status of a controller with no ended jobs:\n%s", b.String())
	}
}

func TestStatusJSON(t *testing.T) {
	b, err := statusJSON(&jobpb.StatusResponse{TargetKind: "bmv2", Jobs: []*jobpb.JobStatus{{Name: "j", PoolSize: 16}}})
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("%v: %s", err, b)
	}
	// snake_case names, and fields at their zero value present too.
	for _, key := range []string{"target_kind", "slots_in_use", "control_lost", "redacted", "jobs"} {
		if _, ok := m[key]; !ok {
			t.Errorf("JSON lacks %q: %s", key, b)
		}
	}
}

// TestWriteStatusTextEscapes: names and texts a client or the controller
// chose reach the operator's terminal escaped: no control character
// (escape sequences, a newline that starts a forged row, a tab that shifts
// a column, a bidirectional override), each shown quoted.
func TestWriteStatusTextEscapes(t *testing.T) {
	const evil = "x\x1b[2J\x1b]0;owned\a\nvictim\tactive\t2/2\u202e"
	st := &jobpb.StatusResponse{
		TargetKind: "softswitch\x1b[31m", Dataplane: "127.0.0.1:48864", Offline: "gone\r\nforged: line", ControlLost: "\x9b6n",
		Jobs: []*jobpb.JobStatus{
			{Name: evil, State: "active\nforged", WorldSize: 1, Ranks: []*jobpb.RankStatus{{Rank: 0, LaneAddresses: []string{"127.0.0.1:1\x1b[A"}}}, RanksOmitted: 1},
			{Name: `"quoted"`, State: "active"},
			{Name: "plain-name ok", State: "active"},
		},
		SwitchCountersError: "bad\x00counter",
		SwitchCounters:      []*jobpb.SwitchCounter{{Name: "drop\x1b[K", Packets: 1}},
		Ended:               map[string]uint64{"finished\x1b[1m": 1},
	}
	for _, counters := range []bool{true, false} {
		if !counters {
			st.SwitchCountersError = ""
		}
		var b strings.Builder
		if err := writeStatusText(&b, "127.0.0.1:50051", st); err != nil {
			t.Fatal(err)
		}
		out := b.String()
		for _, r := range out {
			if r != '\n' && (r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) || r == '\u202e') {
				t.Errorf("status writes the control character %U:\n%q", r, out)
			}
		}
		for _, line := range strings.Split(out, "\n") {
			if strings.HasPrefix(line, "victim") || strings.HasPrefix(line, "forged") {
				t.Errorf("a name forged the row %q:\n%s", line, out)
			}
		}
		for _, want := range []string{strconv.Quote(evil), `"\"quoted\""`, "\nplain-name ok ", `switch offline: "gone\r\nforged: line"`} {
			if !strings.Contains(out, want) {
				t.Errorf("status lacks %s:\n%s", want, out)
			}
		}
	}
}

// TestTermLines: an error's text keeps its lines, tabs and quotes, and
// loses every other control character to its escape.
func TestTermLines(t *testing.T) {
	for in, want := range map[string]string{
		"job \"a\" failed:\n\tdetail":                 "job \"a\" failed:\n\tdetail",
		"aborted by rank 1: \x1b]0;owned\a\x1b[2J":    `aborted by rank 1: \x1b]0;owned\a\x1b[2J`,
		"bad byte \xff, C1 \u009b, bidi \u202e, ok é": `bad byte \xff, C1 \u009b, bidi \u202e, ok é`,
	} {
		if got := termLines(in); got != want {
			t.Errorf("termLines(%q) = %q, want %q", in, got, want)
		}
	}
}
