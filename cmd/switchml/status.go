package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/switchml/switchml-go/jobpb"
	"github.com/switchml/switchml-go/secure"
	"github.com/switchml/switchml-go/switchml"
)

func init() {
	register("status", "what a controller holds: live jobs with their ranks and slots, jobs still gathering, the pool's use and the switch's counters", runStatus)
}

func runStatus(ctx context.Context, args []string) error {
	return statusCommand(ctx, args, os.Stdout)
}

func statusCommand(ctx context.Context, args []string, out io.Writer) error {
	fs := newFlags("status", "[--controller ADDR] [--json] [flags]")
	addr := fs.String("controller", switchml.DefaultController, "controller gRPC address")
	asJSON := fs.Bool("json", false, "print the controller's answer as JSON (snake_case field names of controller.proto's StatusResponse)")
	noCounters := fs.Bool("no-counters", false, "do not read the switch's counters")
	timeout := fs.Duration("timeout", 10*time.Second, "how long to wait for the controller")
	tlsCA := fs.String("tls-ca", "", "CA (PEM) of the controller's certificate: the link to the controller speaks TLS")
	tlsCert := fs.String("tls-cert", "", "certificate (PEM) presented to the controller (mutual TLS)")
	tlsKey := fs.String("tls-key", "", "key (PEM) of --tls-cert")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	tlsCfg, err := secure.Client(*tlsCA, *tlsCert, *tlsKey)
	if err != nil {
		return fmt.Errorf("--tls-ca, --tls-cert, --tls-key: %w", err)
	}
	creds := insecure.NewCredentials()
	if tlsCfg != nil {
		creds = credentials.NewTLS(tlsCfg)
	}
	cc, err := grpc.NewClient(*addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		return fmt.Errorf("--controller %q: %w", *addr, err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	st, err := fetchStatus(ctx, jobpb.NewJobServiceClient(cc), *noCounters)
	if err != nil {
		return fmt.Errorf("status of the controller at %s: %w (is `switchml controller` running there, and given TLS flags if it requires TLS?)", *addr, err)
	}
	if *asJSON {
		b, err := protojson.MarshalOptions{UseProtoNames: true, EmitUnpopulated: true, Multiline: true}.Marshal(st)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(out, "%s\n", b)
		return err
	}
	return writeStatus(out, *addr, st)
}

// statusPagesMax bounds how many pages fetchStatus follows: more than the
// controller's job table can fill (4,096 jobs at 256 a page).
const statusPagesMax = 64

// fetchStatus asks for the controller's status page by page and returns
// the pages as one answer: the first page's counters and totals, every
// page's jobs.
func fetchStatus(ctx context.Context, c jobpb.JobServiceClient, noCounters bool) (*jobpb.StatusResponse, error) {
	req := &jobpb.StatusRequest{SkipSwitchCounters: noCounters}
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

// writeStatus prints a controller's status as tables for people.
func writeStatus(w io.Writer, addr string, st *jobpb.StatusResponse) error {
	fmt.Fprintf(w, "controller %s: %s switch, data plane %s; %d of %d slots per set in use\n",
		addr, st.GetTargetKind(), st.GetDataplane(), st.GetSlotsInUse(), st.GetSlots())
	if st.GetOffline() != "" {
		fmt.Fprintf(w, "switch offline: %s\n", st.GetOffline())
	}
	if st.GetControlLost() != "" {
		fmt.Fprintf(w, "control lost: %s\n", st.GetControlLost())
	}
	if st.GetRedacted() {
		fmt.Fprintln(w, "redacted: this certificate is not an operator's (controller --admin), so lane addresses and switch placement are left out")
	}
	fmt.Fprintln(w)
	if len(st.GetJobs()) == 0 {
		fmt.Fprintln(w, "no jobs")
	} else {
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "JOB\tSTATE\tRANKS\tLANES x WINDOW\tPACKET\tSLOTS\tSWITCH ID\tAGE")
		for _, j := range st.GetJobs() {
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
			name := j.GetName()
			if name == "" {
				name = "(unclaimed)"
			}
			fmt.Fprintf(tw, "%s\t%s\t%d/%d\t%d x %d\t%d\t%s\t%s\t%s\n", name, j.GetState(), len(j.GetRanks()), j.GetWorldSize(),
				j.GetLanes(), j.GetWindow(), j.GetPacketElements(), slots, id, age)
		}
		tw.Flush()
		fmt.Fprintln(w)
		tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "JOB\tRANK\tLEASE\tLANE ADDRESSES")
		for _, j := range st.GetJobs() {
			for _, r := range j.GetRanks() {
				lease := "held"
				switch {
				case r.GetLeft():
					lease = "left"
				case !r.GetLeased():
					lease = "-"
				}
				fmt.Fprintf(tw, "%s\t%d\t%s\t%s\n", j.GetName(), r.GetRank(), lease, strings.Join(r.GetLaneAddresses(), " "))
			}
			if n := j.GetRanksOmitted(); n > 0 {
				fmt.Fprintf(tw, "%s\t(%d more)\t\t\n", j.GetName(), n)
			}
		}
		tw.Flush()
	}
	fmt.Fprintln(w)
	switch {
	case st.GetSwitchCountersError() != "":
		fmt.Fprintf(w, "switch counters: %s\n", st.GetSwitchCountersError())
	case len(st.GetSwitchCounters()) > 0:
		fmt.Fprintln(w, "switch counters, packets since the controller programmed the switch (the switch counts for all jobs together, not per job;")
		fmt.Fprintln(w, "per-job packets and retransmissions are the workers' own: switchml allreduce --metrics):")
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		for _, c := range st.GetSwitchCounters() {
			fmt.Fprintf(tw, "  %s\t%d\t\n", c.GetName(), c.GetPackets())
		}
		tw.Flush()
	}
	var ended []string
	for cause, n := range st.GetEnded() {
		if n > 0 {
			ended = append(ended, fmt.Sprintf("%s %d", cause, n))
		}
	}
	sort.Strings(ended)
	if len(ended) > 0 {
		fmt.Fprintf(w, "\njobs ended since the controller started: %s\n", strings.Join(ended, ", "))
	}
	return nil
}
