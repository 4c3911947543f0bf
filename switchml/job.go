package switchml

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/switchml/switchml-go/field"
	"github.com/switchml/switchml-go/internal/backoff"
	"github.com/switchml/switchml-go/jobpb"
)

// jobClient is a rank's side of the controller's job service: it joins
// the job, holds the lease (the Watch stream), runs barriers and
// broadcasts through the controller, reports this rank's failures and
// says it left. A session over the ring from Join has no client: its
// calls to the controller are not made.
type jobClient struct {
	// cfg names the job, this rank and the controller; the packet size
	// it holds may be the one the switch has not chosen yet.
	cfg Config
	st  *state

	conn      *grpc.ClientConn
	client    jobpb.JobServiceClient
	sessionID uint64
	jobID     uint32 // the switch's id of the job (claims it back from a restarted controller)
	// rankSecret proves this rank's calls within the session to the
	// controller; it never goes into an error or a log.
	rankSecret []byte
	barriers   atomic.Uint64 // barrier calls made, for BarrierRequest.Seq
	// detached: the session left the controller (it moved to the ring):
	// it does not say it leaves when it closes.
	detached atomic.Bool

	reports   sync.WaitGroup // failure reports in flight
	inFlight  sync.WaitGroup // barriers and broadcasts in flight (call)
	stopWatch context.CancelFunc
	watchDone chan struct{}
}

func newJobClient(cfg Config, st *state) *jobClient {
	return &jobClient{cfg: cfg, st: st, watchDone: make(chan struct{})}
}

// dial sets up the client of the controller's job service (it connects
// on first use).
func (j *jobClient) dial() error {
	creds := insecure.NewCredentials()
	if j.cfg.TLS != nil {
		creds = credentials.NewTLS(j.cfg.TLS)
	}
	conn, err := grpc.NewClient(j.cfg.Controller, grpc.WithTransportCredentials(creds))
	if err != nil {
		return fmt.Errorf("%w: bad Config.Controller %q: %v", ErrControllerUnreachable, j.cfg.Controller, err)
	}
	j.conn = conn
	j.client = jobpb.NewJobServiceClient(conn)
	return nil
}

// drop closes the connection to the controller of a session that runs
// without it (over the ring from Join).
func (j *jobClient) drop() {
	if j.conn != nil {
		j.conn.Close()
		j.conn, j.client = nil, nil
	}
}

// reach asks the controller what the switch takes, waiting no longer than
// ConnectTimeout for a connection: an address where nothing answers fails
// fast, naming it. A controller that is connected but slow to answer gets
// the caller's whole deadline. Nil, and no error, from a controller that
// predates Describe.
func (j *jobClient) reach(ctx context.Context) (*jobpb.DescribeResponse, error) {
	cctx, cancel := context.WithTimeout(ctx, j.cfg.ConnectTimeout)
	d, err := j.client.Describe(cctx, &jobpb.DescribeRequest{}, grpc.WaitForReady(true))
	cancel()
	if err != nil && ctx.Err() == nil && cctx.Err() != nil {
		if st := j.conn.GetState(); st != connectivity.Ready && st != connectivity.Idle {
			return nil, fmt.Errorf("%w: no connection to %s within %v (Config.ConnectTimeout): %s (%s)", ErrControllerUnreachable, j.cfg.Controller, j.cfg.ConnectTimeout,
				status.Convert(err).Message(), j.unreachableHint())
		}
		// Connected, but slow to answer: wait with the caller's deadline.
		d, err = j.client.Describe(ctx, &jobpb.DescribeRequest{}, grpc.WaitForReady(true))
	}
	switch {
	case status.Code(err) == codes.Unimplemented:
		return nil, nil
	case err != nil:
		return nil, j.rpcError("describe the switch", err)
	}
	return d, nil
}

// fallbackProbe bounds how long Join tries to reach the controller before
// it takes it for unreachable and, with FallbackPeers, forms the ring
// without it.
const fallbackProbe = 2 * time.Second

// probe asks the controller what the switch takes, failing fast while no
// connection comes up, for up to fallbackProbe. unreachable says why the
// controller counts as unreachable; d is nil when the answer was anything
// else than a description, which Join then asks for again.
func (j *jobClient) probe(ctx context.Context) (d *jobpb.DescribeResponse, unreachable error) {
	pctx, cancel := context.WithTimeout(ctx, fallbackProbe)
	defer cancel()
	wait := backoff.New(20*time.Millisecond, 200*time.Millisecond)
	for {
		d, err := j.client.Describe(pctx, &jobpb.DescribeRequest{})
		switch {
		case err == nil:
			return d, nil
		case status.Code(err) != codes.Unavailable && pctx.Err() == nil:
			return nil, nil
		}
		if wait.Wait(pctx) != nil {
			if ctx.Err() != nil {
				return nil, nil // the caller's own deadline: Join says so
			}
			return nil, fmt.Errorf("no connection to the controller at %s within %v: %s", j.cfg.Controller, fallbackProbe, status.Convert(err).Message())
		}
	}
}

// packetElements is the packet size of a configuration that leaves it to
// the switch (Config.PacketElements 0), from probed or a Describe call; it
// refuses a switch the configuration cannot use.
func (j *jobClient) packetElements(ctx context.Context, cfg Config, probed *jobpb.DescribeResponse) (int, error) {
	if cfg.PacketElements != 0 {
		return cfg.PacketElements, nil
	}
	d := probed
	var err error
	if d == nil {
		d, err = j.client.Describe(ctx, &jobpb.DescribeRequest{}, grpc.WaitForReady(true))
	}
	switch {
	case status.Code(err) == codes.Unimplemented: // a controller that predates Describe serves the software switch
		return DefaultPacketElements, nil
	case err != nil:
		return 0, j.rpcError("describe the switch", err)
	}
	n := choosePacketElements(d.GetPacketElements(), d.GetMaxExtendedElements(), cfg.Extended)
	if n == 0 && cfg.Extended {
		return 0, configField.Errorf("%w: {Extended} is set, but the %s switch takes only the compatible header: join without {Extended}", ErrJobMismatch, d.GetTargetKind())
	}
	if n == 0 {
		return 0, fmt.Errorf("%w: the %s switch describes no packet size for the compatible header", ErrJobMismatch, d.GetTargetKind())
	}
	// Before registering, where the switch says whether it checks tags:
	// the other ranks need not wait for this one.
	return n, authMismatch(cfg.Auth, d.GetAuth())
}

// register registers this rank, its lanes (addrs) and its ring address,
// retrying while the controller is unavailable, and returns the
// controller's answer once every rank has registered.
func (j *jobClient) register(ctx context.Context, cfg Config, addrs []string, bind, ringAddr string) (*jobpb.RegisterResponse, error) {
	format := jobpb.Format_FORMAT_COMPAT
	if cfg.Extended {
		format = jobpb.Format_FORMAT_EXTENDED
	}
	var resp *jobpb.RegisterResponse
	err := retryUnavailable(ctx, nil, func() error {
		var err error
		resp, err = j.client.Register(ctx, &jobpb.RegisterRequest{
			Job: cfg.Job, Rank: uint32(cfg.Rank), WorldSize: uint32(cfg.Workers),
			Lanes: uint32(cfg.Lanes), Window: uint32(cfg.Window), Elements: uint32(cfg.PacketElements),
			Format: format, LaneAddresses: addrs, Mac: macOf(bind), Token: cfg.Token,
			FallbackAddress: ringAddr, Sparse: cfg.Sparse, SparseCrossover: sparseCrossover(cfg), WireBits: uint32(cfg.WireBits),
		}, grpc.WaitForReady(true))
		return err
	})
	if err != nil {
		return nil, j.rpcError("join", err)
	}
	return resp, nil
}

// accept takes the session the controller granted: its ids and this
// rank's secret.
func (j *jobClient) accept(resp *jobpb.RegisterResponse) {
	j.sessionID, j.jobID, j.rankSecret = resp.SessionId, resp.JobId, resp.GetRankSecret()
}

// watch opens this rank's lease on the session (jobpb Watch) and
// follows it in the background: if the controller ends the session, the
// session becomes unusable with the controller's reason, and calls in flight
// stop at once instead of waiting for the switch to give up.
func (j *jobClient) watch() error {
	ctx, cancel := context.WithCancel(context.Background())
	j.stopWatch = cancel
	req := &jobpb.WatchRequest{Job: j.cfg.Job, Rank: uint32(j.cfg.Rank), SessionId: j.sessionID, JobId: j.jobID, Token: j.cfg.Token, RankSecret: j.rankSecret}
	stream, err := j.client.Watch(ctx, req)
	var ev *jobpb.WatchEvent
	if err == nil {
		ev, err = stream.Recv()
	}
	switch {
	case status.Code(err) == codes.Unimplemented:
		close(j.watchDone) // a controller that holds no leases
		return nil
	case err != nil:
		cancel()
		return j.rpcError("watch the session", err)
	case ev.GetAborted():
		cancel()
		return abortedBy(ev)
	}
	go func() {
		defer close(j.watchDone)
		j.follow(ctx, stream, req)
	}()
	return nil
}

// follow reads the lease's events. When the stream breaks while the session
// lives, it watches again, as long as it takes: the data plane does not
// need the controller, and a controller that is back with the session still
// known (a broken link) takes the lease up again; one that no longer knows
// the session (it restarted, and reprogrammed the switch) ends it with that
// cause, so that the calls in flight fail at once.
func (j *jobClient) follow(ctx context.Context, stream jobpb.JobService_WatchClient, req *jobpb.WatchRequest) {
	wait := backoff.New(50*time.Millisecond, 2*time.Second)
	for {
		for {
			ev, err := stream.Recv()
			if err != nil {
				break
			}
			if ev.GetAborted() {
				j.st.abort(abortedBy(ev))
				return
			}
			wait.Reset()
		}
		for {
			if wait.Wait(ctx) != nil {
				return // this rank closed
			}
			var err error
			if stream, err = j.client.Watch(ctx, req, grpc.WaitForReady(true)); err == nil {
				var ev *jobpb.WatchEvent
				if ev, err = stream.Recv(); err == nil {
					if ev.GetAborted() {
						j.st.abort(abortedBy(ev))
						return
					}
					break // the lease is held again
				}
			}
			switch status.Code(err) {
			case codes.NotFound, codes.FailedPrecondition, codes.Aborted:
				j.st.abort(fmt.Errorf("%w: %w: %w: the controller at %s no longer holds this session: it restarted, and a restarted controller reprograms the switch; join again (%s)",
					ErrAborted, ErrControllerRestarted, ErrSwitchLost, j.cfg.Controller, status.Convert(err).Message()))
				return
			}
		}
	}
}

// abortedBy is the error of a lease's end.
func abortedBy(ev *jobpb.WatchEvent) error { return ended(ev.GetCause(), ev.GetReason()) }

// endLease ends this rank's lease on a session that leaves the switch
// (it moves to the ring): the controller has nothing more to say about
// it.
func (j *jobClient) endLease() {
	if j.stopWatch != nil {
		j.stopWatch()
	}
}

// detach leaves the session on the controller as it is: close does not
// say this rank left, as the session runs on, over the ring.
func (j *jobClient) detach() { j.detached.Store(true) }

// reportAsync reports a failure without blocking the caller; close waits
// for the report before it leaves, so that the peers learn the cause and
// not a departure.
func (j *jobClient) reportAsync(reason error) {
	if j.client == nil || j.sessionID == 0 {
		return // no session on a controller (the ring since Join)
	}
	j.reports.Add(1)
	go func() {
		defer j.reports.Done()
		_, _ = j.reportFailure(reason)
	}()
}

// reportFailure tells the controller that this rank can no longer take part
// (its session broke), so that the other ranks learn why at once.
func (j *jobClient) reportFailure(reason error) (*jobpb.AbortResponse, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	return j.client.Abort(ctx, &jobpb.AbortRequest{Job: j.cfg.Job, Rank: uint32(j.cfg.Rank), SessionId: j.sessionID, Reason: reason.Error(),
		SwitchUnreachable: errors.Is(reason, ErrTimeoutBudget), RankSecret: j.rankSecret})
}

// leaseVerdictWait bounds how long a rank that gave up on the switch, and
// found its session already ended by a peer's report, waits for the
// controller's word on why (through its lease).
const leaseVerdictWait = 2 * time.Second

// verdictOnGiveUp reports at once that this rank gave up on the switch,
// and returns the controller's verdict when it is not a switch loss: the
// switch answers, and the job's slots wait for ranks that stopped sending
// (ErrAborted naming them). Nil: a switch loss, or no verdict to be had.
// reported says the controller heard this rank's report.
func (j *jobClient) verdictOnGiveUp(gaveUp error) (reported bool, verdict error) {
	if j.client == nil || j.sessionID == 0 {
		return false, nil
	}
	resp, err := j.reportFailure(gaveUp)
	if err != nil {
		return false, nil
	}
	switch resp.GetCause() {
	case "switch_lost":
		return true, nil
	case "":
		// A peer's report ended the session first: its cause comes
		// through the lease.
		select {
		case <-j.st.aborted:
		case <-time.After(leaseVerdictWait):
		}
		if broken := j.st.err(); broken != nil && errors.Is(broken, ErrAborted) && !errors.Is(broken, ErrSwitchLost) {
			return true, broken
		}
		return true, nil
	}
	return true, ended(resp.GetCause(), resp.GetReason())
}

// leaveEarly ends the job for every rank when this one stops taking part
// in the middle of it (see state.departure): its peers would otherwise
// wait for its share until their own deadlines. The controller tells them
// why, naming this rank. It returns err, for the caller.
func (j *jobClient) leaveEarly(why error, err error) error {
	if j.st.fail(fmt.Errorf("switchml: session ended: this rank %v (close it and join again)", why)) {
		j.reportAsync(why)
	}
	return err
}

// notStarted fails a call whose context ended before it began. The peers
// make the same call and would wait for this rank's share, so a call its
// caller cancelled (an interrupt) ends the job for all of them.
func (j *jobClient) notStarted(ctx context.Context) error {
	err := ctx.Err()
	if why := j.st.departure(ctx, "allreduce"); why != nil {
		return j.leaveEarly(why, err)
	}
	return err
}

// barrier returns once every rank called it with the same name.
func (j *jobClient) barrier(ctx context.Context, name string) error {
	caller := ctx
	ctx, done, err := j.call(ctx)
	if err != nil {
		return err
	}
	defer done()
	// The same count on every retry of this call: a controller restarted
	// after the other ranks passed it releases it by the count.
	seq := j.barriers.Add(1)
	err = retryUnavailable(ctx, j.st.aborted, func() error {
		_, err := j.client.Barrier(ctx, &jobpb.BarrierRequest{Job: j.cfg.Job, Rank: uint32(j.cfg.Rank), SessionId: j.sessionID, Name: name, Seq: seq, RankSecret: j.rankSecret}, grpc.WaitForReady(true))
		return err
	})
	if err != nil {
		return j.callError(caller, "barrier "+name, err)
	}
	return nil
}

// broadcast returns root's data on every rank.
func (j *jobClient) broadcast(ctx context.Context, name string, root int, data []byte) ([]byte, error) {
	caller := ctx
	ctx, done, err := j.call(ctx)
	if err != nil {
		return nil, err
	}
	defer done()
	var resp *jobpb.BroadcastResponse
	err = retryUnavailable(ctx, j.st.aborted, func() error {
		var err error
		resp, err = j.client.Broadcast(ctx, &jobpb.BroadcastRequest{Job: j.cfg.Job, Rank: uint32(j.cfg.Rank), SessionId: j.sessionID, Root: uint32(root), Data: data, Name: name, RankSecret: j.rankSecret}, grpc.WaitForReady(true))
		return err
	})
	if err != nil {
		return nil, j.callError(caller, "broadcast "+name, err)
	}
	return resp.Data, nil
}

// retryUnavailable runs call again while it fails because the connection
// to the controller broke under it (the controller restarting): the call
// waits for the controller instead of failing, until ctx ends or stop
// closes. A controller that no longer knows the call's session answers
// with an error that is not retried.
func retryUnavailable(ctx context.Context, stop <-chan struct{}, call func() error) error {
	wait := backoff.New(20*time.Millisecond, time.Second)
	for {
		err := call()
		if status.Code(err) != codes.Unavailable {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-stop:
			return err
		case <-time.After(wait.Next()):
		}
	}
}

// call bounds a call to the controller within the session: it ends when
// the session is aborted or closed, and waits for a controller that is
// briefly away (restarting) no longer than JoinTimeout when ctx has no
// deadline. close waits for the calls it started to end.
func (j *jobClient) call(ctx context.Context) (context.Context, context.CancelFunc, error) {
	j.st.mu.Lock()
	if j.st.closed {
		j.st.mu.Unlock()
		return nil, nil, ErrClosed
	}
	j.inFlight.Add(1)
	j.st.mu.Unlock()
	var cancel context.CancelFunc
	if _, ok := ctx.Deadline(); ok {
		ctx, cancel = context.WithCancel(ctx)
	} else {
		ctx, cancel = context.WithTimeout(ctx, j.cfg.JoinTimeout)
	}
	stop := make(chan struct{})
	go func() {
		select {
		case <-j.st.aborted:
			cancel()
		case <-j.st.quit:
			cancel()
		case <-stop:
		}
	}()
	return ctx, func() { close(stop); cancel(); j.inFlight.Done() }, nil
}

// callError explains a failed call within the session: the session's own
// end when it was aborted, else the controller's answer. A call that ended
// because its caller cancelled it, or closed the session, ends the job for
// every rank (leaveEarly).
func (j *jobClient) callError(caller context.Context, what string, err error) error {
	if broken := j.st.err(); broken != nil && errors.Is(broken, ErrAborted) {
		return fmt.Errorf("switchml: %s: %w", what, broken)
	}
	if why := j.st.departure(caller, what); why != nil {
		if errors.Is(caller.Err(), context.Canceled) {
			return j.leaveEarly(why, fmt.Errorf("switchml: %s: %w", what, context.Canceled))
		}
		return j.leaveEarly(why, fmt.Errorf("switchml: %s: %w", what, ErrClosed))
	}
	if status.Code(err) == codes.NotFound {
		return fmt.Errorf("%w: %w: %s: the controller at %s no longer holds this session: it restarted; join again (%s)", ErrAborted, ErrControllerRestarted, what, j.cfg.Controller, status.Convert(err).Message())
	}
	if status.Code(err) == codes.DeadlineExceeded && j.conn.GetState() == connectivity.Ready {
		// The controller answered that the peers did not all come in
		// time, naming those missing: this rank gives up, out of step
		// with them, and the job ends for all with that cause.
		msg := status.Convert(err).Message()
		return j.leaveEarly(fmt.Errorf("gave up waiting in %s: %s", what, msg), fmt.Errorf("%w (%s timed out): %s", ErrRanksMissing, what, msg))
	}
	if status.Code(err) == codes.Aborted {
		// The session ended under the call: its cause comes through the
		// lease, a moment later.
		select {
		case <-j.st.aborted:
			return fmt.Errorf("switchml: %s: %w", what, j.st.err())
		case <-caller.Done():
		case <-time.After(leaseVerdictWait):
		}
	}
	return j.rpcError(what, err)
}

// close waits for the barriers, broadcasts and reports in flight, tells
// the controller this rank left (unless it detached) and ends the lease,
// after Leave, so that the controller takes it for a departure, not a
// death.
func (j *jobClient) close() error {
	j.inFlight.Wait()
	j.reports.Wait()
	var err error
	if j.client != nil && j.sessionID != 0 && !j.detached.Load() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err = j.client.Leave(ctx, &jobpb.LeaveRequest{Job: j.cfg.Job, Rank: uint32(j.cfg.Rank), SessionId: j.sessionID, RankSecret: j.rankSecret})
		if err != nil {
			err = j.rpcError("leave", err)
		}
	}
	if j.stopWatch != nil {
		j.stopWatch()
		<-j.watchDone
	}
	if j.conn != nil {
		j.conn.Close()
	}
	return err
}

// abandon releases what a Join that failed had opened.
func (j *jobClient) abandon() {
	if j.stopWatch != nil {
		j.stopWatch()
	}
	if j.conn != nil {
		j.conn.Close()
	}
}

// rpcError explains a failed call to the controller: what failed, then
// the controller's answer.
func (j *jobClient) rpcError(what string, err error) error {
	st, ok := status.FromError(err)
	if !ok {
		return fmt.Errorf("switchml: %s: %w", what, err)
	}
	switch st.Code() {
	case codes.Unavailable:
		return fmt.Errorf("%w: %s at %s: %s (%s)", ErrControllerUnreachable, what, j.cfg.Controller, st.Message(), j.unreachableHint())
	case codes.FailedPrecondition, codes.InvalidArgument, codes.PermissionDenied, codes.AlreadyExists:
		return fmt.Errorf("%w: %s: %w", ErrJobMismatch, what, answer(st.Message()))
	case codes.DeadlineExceeded:
		if st := j.conn.GetState(); st == connectivity.TransientFailure || st == connectivity.Connecting {
			return fmt.Errorf("%w: %s: no connection to %s before the deadline: %s (%s)", ErrControllerUnreachable, what, j.cfg.Controller, st, j.unreachableHint())
		}
		return fmt.Errorf("%w (%s timed out): %s (did every rank of job %q start?)", ErrRanksMissing, what, st.Message(), j.cfg.Job)
	case codes.Canceled:
		return fmt.Errorf("switchml: %s: %w", what, context.Canceled)
	case codes.Aborted:
		return fmt.Errorf("%w: %s: %s", ErrAborted, what, st.Message())
	case codes.Unimplemented:
		if strings.Contains(st.Message(), "unknown service") {
			return fmt.Errorf("%w: %s: %s is not a switchml controller: no job service there (the switch's P4Runtime port?); give the address the controller's job service listens on",
				ErrControllerUnreachable, what, j.cfg.Controller)
		}
	}
	return fmt.Errorf("switchml: %s: %s: %w", what, st.Code(), answer(st.Message()))
}

// configName is a Config field as the controller names it to a worker.
var configName = regexp.MustCompile(`switchml\.Config\.([A-Z][A-Za-z0-9]*)`)

// answer is the controller's refusal msg as an error: a field.Error where
// it names this worker's settings (switchml.Config.Token), so that a
// program that sets them from flags writes its flags (field.Named); the
// text is msg either way.
func answer(msg string) error {
	if !configName.MatchString(msg) {
		return errors.New(msg)
	}
	format := configName.ReplaceAllString(strings.ReplaceAll(msg, "%", "%%"), "{$1}")
	return field.Owner("switchml.Config").Errorf(format)
}

// unreachableHint says what to check when no connection to the controller
// comes up.
func (j *jobClient) unreachableHint() string {
	if j.cfg.TLS == nil {
		return "is `switchml controller` running there? If it requires TLS, give its CA (and this worker's certificate)"
	}
	return "is `switchml controller` running there, and do its certificate and this worker's match the CAs each trusts?"
}
