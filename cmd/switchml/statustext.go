package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/switchml/switchml-go/jobpb"
)

// newJobClient is a client of the job service at addr, over TLS when tlsCfg
// is set. It connects on first use.
func newJobClient(addr string, tlsCfg *tls.Config) (jobpb.JobServiceClient, io.Closer, error) {
	creds := insecure.NewCredentials()
	if tlsCfg != nil {
		creds = credentials.NewTLS(tlsCfg)
	}
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		return nil, nil, err
	}
	return jobpb.NewJobServiceClient(cc), cc, nil
}

// statusPagesMax bounds how many pages fetchStatus follows: more than the
// controller's job table can fill (4,096 jobs at 256 a page).
const statusPagesMax = 64

// fetchStatus asks for the controller's status page by page, waiting for
// the controller to come up, and returns the pages as one answer: the
// first page's counters and totals, every page's jobs.
func fetchStatus(ctx context.Context, c jobpb.JobServiceClient, skipCounters bool) (*jobpb.StatusResponse, error) {
	req := &jobpb.StatusRequest{SkipSwitchCounters: skipCounters}
	var all *jobpb.StatusResponse
	for range statusPagesMax {
		st, err := c.Status(ctx, req, grpc.WaitForReady(true))
		if err != nil {
			return nil, err
		}
		if all == nil {
			all = st
		} else {
			all.Jobs = append(all.Jobs, st.GetJobs()...)
		}
		if st.GetNextPageToken() == "" {
			all.NextPageToken = ""
			return all, nil
		}
		// Later pages need no second read of the counters.
		req = &jobpb.StatusRequest{SkipSwitchCounters: true, PageToken: st.GetNextPageToken()}
	}
	return nil, fmt.Errorf("the job table did not end after %d pages", statusPagesMax)
}

// statusJSON is st as indented JSON with the proto's snake_case field
// names, every field present.
func statusJSON(st *jobpb.StatusResponse) ([]byte, error) {
	return protojson.MarshalOptions{UseProtoNames: true, EmitUnpopulated: true, Multiline: true}.Marshal(st)
}

// termText is s as a terminal may show it: s itself when every character
// of it is printable and it does not start with a quote, else s quoted as
// a Go string literal, so that no name a client chose (or a controller
// sent) can move the cursor, recolour, retitle or clear the operator's
// terminal, start a forged row (a newline) or shift a table's columns (a
// tab). Only a quoted string starts with a quote, so a name cannot pass
// for another's escaped form.
func termText(s string) string {
	if strings.HasPrefix(s, `"`) || strings.IndexFunc(s, func(r rune) bool { return r == utf8.RuneError || !strconv.IsPrint(r) }) >= 0 {
		return strconv.Quote(s)
	}
	return s
}

// termLines is text of several lines (an error, which may carry what
// another process wrote: a peer rank's abort reason) as a terminal may
// show it: its newlines and tabs kept, every other character that is not
// printable escaped as in a Go string literal.
func termLines(s string) string {
	if strings.IndexFunc(s, func(r rune) bool { return r != '\n' && r != '\t' && (r == utf8.RuneError || !strconv.IsPrint(r)) }) < 0 {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		if r == '\n' || r == '\t' || (strconv.IsPrint(r) && (r != utf8.RuneError || n > 1)) {
			b.WriteString(s[i : i+n])
		} else {
			q := strconv.Quote(s[i : i+n])
			b.WriteString(q[1 : len(q)-1])
		}
		i += n
	}
	return b.String()
}

// writeStatusText writes the status of the controller at addr as tables
// for people: the switch, the jobs, their ranks, the switch's counters and
// the jobs that ended.
func writeStatusText(w io.Writer, addr string, st *jobpb.StatusResponse) error {
	fmt.Fprintf(w, "controller %s: %s switch, data plane %s; %d of %d slots per set in use\n",
		termText(addr), termText(st.GetTargetKind()), termText(st.GetDataplane()), st.GetSlotsInUse(), st.GetSlots())
	if st.GetOffline() != "" {
		fmt.Fprintf(w, "switch offline: %s\n", termText(st.GetOffline()))
	}
	if st.GetControlLost() != "" {
		fmt.Fprintf(w, "control lost: %s\n", termText(st.GetControlLost()))
	}
	if st.GetRedacted() {
		fmt.Fprintln(w, "redacted: this certificate is not an operator's (controller --admin), so other identities' jobs, lane addresses and switch placement are left out")
	}
	fmt.Fprintln(w)
	if len(st.GetJobs()) == 0 {
		fmt.Fprintln(w, "no jobs")
	} else {
		writeJobs(w, st.GetJobs())
		fmt.Fprintln(w)
		writeRanks(w, st.GetJobs())
	}
	fmt.Fprintln(w)
	writeCounters(w, st)
	_, err := io.WriteString(w, endedText(st.GetEnded()))
	return err
}

func writeJobs(w io.Writer, jobs []*jobpb.JobStatus) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "JOB\tSTATE\tRANKS\tLANES x WINDOW\tPACKET\tSLOTS\tSWITCH ID\tAGE")
	for _, j := range jobs {
		slots := "-"
		if j.GetPoolSize() > 0 {
			slots = fmt.Sprintf("%d-%d (%d)", j.GetPoolBase(), j.GetPoolBase()+j.GetPoolSize()-1, j.GetPoolSize())
		}
		id, age := "-", "-"
		if j.GetJobId() != 0 {
			id = fmt.Sprint(j.GetJobId())
		}
		if j.GetAgeSeconds() > 0 {
			age = (time.Duration(j.GetAgeSeconds() * float64(time.Second))).Round(time.Second).String()
		}
		name := termText(j.GetName())
		if name == "" {
			name = "(unclaimed)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d/%d\t%d x %d\t%d\t%s\t%s\t%s\n", name, termText(j.GetState()), len(j.GetRanks()), j.GetWorldSize(),
			j.GetLanes(), j.GetWindow(), j.GetPacketElements(), slots, id, age)
	}
	tw.Flush()
}

func writeRanks(w io.Writer, jobs []*jobpb.JobStatus) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "JOB\tRANK\tLEASE\tLANE ADDRESSES")
	for _, j := range jobs {
		name := termText(j.GetName())
		for _, r := range j.GetRanks() {
			lease := "held"
			switch {
			case r.GetLeft():
				lease = "left"
			case !r.GetLeased():
				lease = "-"
			}
			fmt.Fprintf(tw, "%s\t%d\t%s\t%s\n", name, r.GetRank(), lease, termText(strings.Join(r.GetLaneAddresses(), " ")))
		}
		if n := j.GetRanksOmitted(); n > 0 {
			fmt.Fprintf(tw, "%s\t(%d more)\t\t\n", name, n)
		}
	}
	tw.Flush()
}

func writeCounters(w io.Writer, st *jobpb.StatusResponse) {
	switch {
	case st.GetSwitchCountersError() != "":
		fmt.Fprintf(w, "switch counters: %s\n", termText(st.GetSwitchCountersError()))
	case len(st.GetSwitchCounters()) > 0:
		fmt.Fprintln(w, "switch counters, packets since the controller programmed the switch (the switch counts for all jobs together, not per job;")
		fmt.Fprintln(w, "per-job packets and retransmissions are the workers' own: switchml allreduce --metrics):")
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		for _, c := range st.GetSwitchCounters() {
			fmt.Fprintf(tw, "  %s\t%d\t\n", termText(c.GetName()), c.GetPackets())
		}
		tw.Flush()
	}
}

// endedText is the line on the jobs that ended, by cause; empty if none.
func endedText(ended map[string]uint64) string {
	var parts []string
	for cause, n := range ended {
		if n > 0 {
			parts = append(parts, fmt.Sprintf("%s %d", termText(cause), n))
		}
	}
	if len(parts) == 0 {
		return ""
	}
	sort.Strings(parts)
	return fmt.Sprintf("\njobs ended since the controller started: %s\n", strings.Join(parts, ", "))
}
