package controller

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/switchml/switchml-go/jobpb"
	"github.com/switchml/switchml-go/p4/controller/jobcore"
	"github.com/switchml/switchml-go/p4/p4info"
	"github.com/switchml/switchml-go/p4/switchjob"
	"github.com/switchml/switchml-go/secure"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// admin is who sees Status unredacted over TLS: ServiceConfig.Admin, or
// certificates with the admin role when it names nobody.
func (s *JobService) admin() secure.Allow {
	if len(s.cfg.Admin.Roles) == 0 && len(s.cfg.Admin.Names) == 0 {
		return secure.Allow{Roles: []string{secure.RoleAdmin}}
	}
	return s.cfg.Admin
}

// switchRef holds the switch in an atomic pointer.
type switchRef struct{ Switch }

// counterReader is a switch whose stats counter can be read (a P4Runtime
// Client).
type counterReader interface {
	ReadCounters(ctx context.Context) ([]int64, error)
}

// statusReadTimeout bounds the read of the switch's counters for Status.
const statusReadTimeout = 5 * time.Second

// dataplanes is the switch's data plane address, or its shards' addresses
// comma-separated.
func (s *JobService) dataplanes() string {
	if len(s.cfg.Shards) < 2 {
		return s.cfg.Dataplane.String()
	}
	out := make([]string, len(s.cfg.Shards))
	for i, a := range s.cfg.Shards {
		out[i] = a.String()
	}
	return strings.Join(out, ",")
}

// Bounds of one Status reply: jobs per page (a request may ask for fewer),
// and the bytes of lane addresses it carries, past which a job's further
// ranks are counted in ranks_omitted instead of listed.
const (
	statusPageMax   = 256
	statusRankBytes = 1 << 20
)

// pageToken and parsePageToken give Status replies' next_page_token: the
// index in the job table's order of the first job of the next page.
func pageToken(next int) string { return "jobs@" + strconv.Itoa(next) }

func parsePageToken(t string) (int, error) {
	if t == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(strings.TrimPrefix(t, "jobs@"))
	if !strings.HasPrefix(t, "jobs@") || err != nil || n < 0 {
		return 0, status.Error(codes.InvalidArgument, "page_token is not one this controller gave out: pass a reply's next_page_token as it came, or none for the first page")
	}
	return n, nil
}

// Status implements jobpb.JobService: the job table as the core
// holds it, a page at a time, and the switch's counters read afterwards,
// outside the lock. Any caller may ask; a caller over TLS that is not an
// operator (ServiceConfig.Admin) gets the reply redacted: only the jobs
// its identity started or registered a rank of (another's job names and
// missing ranks would let it join them), and no lane addresses, switch
// job ids or partition bases, which would help forge packets into a job.
func (s *JobService) Status(ctx context.Context, req *jobpb.StatusRequest) (*jobpb.StatusResponse, error) {
	first, err := parsePageToken(req.GetPageToken())
	if err != nil {
		return nil, err
	}
	size := int(req.GetPageSize())
	if size <= 0 || size > statusPageMax {
		size = statusPageMax
	}
	id := secure.IdentityOf(ctx)
	redact := id.TLS && !s.admin().Permits(id)
	s.mu.Lock()
	g := s.core.Gauges()
	resp := &jobpb.StatusResponse{
		TargetKind: s.cfg.Target.Kind, Dataplane: s.dataplanes(), Slots: uint32(s.cfg.Slots),
		SlotsInUse: uint32(g.SlotsInUse), Offline: s.core.Offline(),
		Ended: map[string]uint64{}, Redacted: redact,
	}
	var next int
	resp.Jobs, next = s.core.StatusJobs(time.Now(), first, size, jobcore.StatusView{Redact: redact, Client: id.Name(), RankBytes: statusRankBytes})
	s.mu.Unlock()
	if next > 0 {
		resp.NextPageToken = pageToken(next)
	}
	resp.ControlLost = s.ControlLost()
	for cause, n := range g.Ended {
		resp.Ended[jobcore.EndCause(cause).String()] = n
	}
	if req.GetSkipSwitchCounters() {
		return resp, nil
	}
	cr, ok := s.current.Load().Switch.(counterReader)
	if !ok {
		resp.SwitchCountersError = "this switch connection reads no counters"
		return resp, nil
	}
	rctx, cancel := context.WithTimeout(ctx, statusReadTimeout)
	defer cancel()
	counts, err := cr.ReadCounters(rctx)
	if err != nil {
		s.metrics.switchErrors.WithLabelValues("read_counters").Inc()
		resp.SwitchCountersError = fmt.Sprintf("reading the switch's stats counter over P4Runtime: %v", err)
		return resp, nil
	}
	for i, n := range counts {
		name := counterName(i)
		if n == 0 && i >= int(switchjob.NumStats) && name == "" {
			continue
		}
		if name == "" {
			name = fmt.Sprintf("stat(%d)", i)
		}
		resp.SwitchCounters = append(resp.SwitchCounters, &jobpb.SwitchCounter{Index: uint32(i), Name: name, Packets: uint64(max(n, 0))})
	}
	return resp, nil
}

// counterName names an index of the stats counter: the pipeline's names,
// and the P4 programs' simulated-loss drops; "" for an unnamed index.
func counterName(i int) string {
	switch {
	case i < int(switchjob.NumStats):
		return switchjob.Stat(i).String()
	case i == p4info.StatsSize-1:
		return "drop_simulated"
	}
	return ""
}
