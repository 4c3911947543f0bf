// Package p4rt is the controller's P4Runtime client: the connection to a
// switch (any target running the SwitchML pipeline: the software switch,
// BMv2 or a Tofino with the matching program), its arbitration, and the
// encoding of a job's placement (switchjob.Placement) as the switch's
// table entries, multicast group and key, written and read back.
//
// The client cannot be locked out of its switch: when another controller
// takes primaryship, it logs who (the software switch's backup status
// names it) and arbitrates again with an election id above the switch's
// highest, unless it was told to yield (ClientConfig.YieldPrimary).
package p4rt

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"strconv"
	"strings"
	"sync"
	"time"

	p4configv1 "github.com/p4lang/p4runtime/go/p4/config/v1"
	p4v1 "github.com/p4lang/p4runtime/go/p4/v1"
	"github.com/switchml/switchml-go/p4/p4info"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

// ClientConfig says which P4Runtime target to program and as whom.
type ClientConfig struct {
	// Target is the P4Runtime server, host:port (BMv2 and Stratum use 9559).
	Target string
	// DeviceID of the switch on that server (default 1).
	DeviceID uint64
	// ElectionID of this controller: the highest live one is primary and
	// the only one allowed to write (default 1).
	ElectionID uint64
	// Role is the P4Runtime role name; empty is the default full-access role.
	Role string
	// DialOptions are added to the gRPC dial (transport credentials default
	// to insecure).
	DialOptions []grpc.DialOption
	Logger      *slog.Logger
	// YieldPrimary keeps the client backup when the switch names another
	// controller primary (a deliberate standby or hand-over). By default
	// the client takes primaryship (back) with an election id one above
	// the highest the switch has seen, so that no other controller can
	// lock it out of the switch it programs.
	YieldPrimary bool
	// OnControl, if set, is called from the stream's goroutine whenever
	// the client becomes primary (cause "") or is not primary (cause says
	// who took primaryship and when); taken is true on a loss of
	// primaryship the client held.
	OnControl func(cause string, taken bool)
}

// Client is a P4Runtime client holding a stream channel with its arbitration.
// It is safe for concurrent use.
type Client struct {
	conn     *grpc.ClientConn
	rt       p4v1.P4RuntimeClient
	deviceID uint64
	role     string
	log      *slog.Logger
	cancel   context.CancelFunc
	done     chan struct{} // closed when the stream ends
	target   string
	yield    bool
	onCtl    func(cause string, taken bool)

	mu        sync.Mutex
	election  *p4v1.Uint128 // raised when the client takes primaryship back
	primary   bool
	lost      string        // why the client is not primary ("" while it is)
	lostWho   string        // who the switch last named primary in the client's place
	retaking  bool          // an arbitration to take primaryship back is under way
	regained  chan struct{} // closed when the client is primary again; nil while it is
	streamErr error
	ids       p4info.IDs // of the pipeline this client pushed or adopted
	regs      RegisterBackend
	keys      bool // the switch checks tags: jobs' keys go with their entries (KeyJobs)
	// adopted: the switch kept a pipeline an earlier controller pushed,
	// with register state that controller's job ids left (KeepResetting).
	adopted bool
}

// ErrNotPrimary is returned by Dial's caller checks and helpers that need to
// write while another controller is primary.
var ErrNotPrimary = errors.New("not the primary controller of the switch")

// Dial connects to the target, opens the stream channel and arbitrates. It
// returns once the switch has answered the arbitration, whether this client
// became primary or backup (see Primary); it waits for the target to come up
// until ctx is done.
func Dial(ctx context.Context, cfg ClientConfig) (*Client, error) {
	if cfg.Target == "" {
		return nil, errors.New("p4rt: no P4Runtime target address")
	}
	if cfg.DeviceID == 0 {
		cfg.DeviceID = 1
	}
	if cfg.ElectionID == 0 {
		cfg.ElectionID = 1
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	opts := append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, cfg.DialOptions...)
	conn, err := grpc.NewClient(cfg.Target, opts...)
	if err != nil {
		return nil, fmt.Errorf("p4rt: P4Runtime target %q: %w", cfg.Target, err)
	}
	sctx, cancel := context.WithCancel(context.Background())
	c := &Client{
		conn: conn, rt: p4v1.NewP4RuntimeClient(conn), deviceID: cfg.DeviceID,
		election: &p4v1.Uint128{Low: cfg.ElectionID}, role: cfg.Role, log: cfg.Logger,
		cancel: cancel, done: make(chan struct{}), ids: p4info.DefaultIDs(),
		target: cfg.Target, yield: cfg.YieldPrimary, onCtl: cfg.OnControl,
	}
	first := make(chan error, 1)
	go c.run(sctx, cfg.Target, first)
	select {
	case err := <-first:
		if err != nil {
			c.Close()
			return nil, err
		}
		return c, nil
	case <-ctx.Done():
		c.Close()
		return nil, fmt.Errorf("p4rt: P4Runtime target %s did not answer arbitration: %w", cfg.Target, ctx.Err())
	}
}

// run owns the stream channel: it arbitrates, then follows arbitration
// updates until the stream ends, taking primaryship back unless it yields.
// The first answer that settles the client (primary, or backup for good),
// or the failure, goes to first.
func (c *Client) run(ctx context.Context, target string, first chan<- error) {
	defer close(c.done)
	report := func(err error) {
		select {
		case first <- err:
		default:
		}
	}
	st, err := c.rt.StreamChannel(ctx, grpc.WaitForReady(true))
	if err != nil {
		report(fmt.Errorf("p4rt: open stream to %s: %w", target, err))
		return
	}
	if err := st.Send(c.arbitration(c.electionID())); err != nil {
		report(fmt.Errorf("p4rt: arbitration with %s: %w", target, err))
		return
	}
	var retake retaker
	for {
		m, err := st.Recv()
		if err != nil {
			if err == io.EOF {
				err = errors.New("stream closed by the switch")
			}
			c.mu.Lock()
			c.primary, c.streamErr = false, err
			c.mu.Unlock()
			report(c.arbitrationError(target, err))
			if ctx.Err() == nil {
				c.log.Warn("controller: P4Runtime stream ended", "target", target, "err", err)
			}
			return
		}
		if a := m.GetArbitration(); a != nil {
			next, settled := c.arbitrated(a)
			if settled {
				report(nil)
			}
			if next == nil {
				continue
			}
			if wait := retake.backoff(time.Now()); wait > 0 {
				select {
				case <-ctx.Done():
					return
				case <-time.After(wait):
				}
			}
			if err := st.Send(c.arbitration(next)); err != nil {
				// The stream is gone: Recv reports why.
				continue
			}
		} else if e := m.GetError(); e != nil {
			c.log.Warn("controller: stream error from switch", "code", codes.Code(e.GetCanonicalCode()), "msg", e.GetMessage())
		}
	}
}

// arbitrationError is the error of a stream the switch ended while the
// client arbitrated. A switch that refuses the arbitration's ids (Stratum
// refuses a device id that is not one of its chassis config's node ids,
// and an election id of 0) is told apart, naming the flags to change.
func (c *Client) arbitrationError(target string, err error) error {
	if status.Code(err) == codes.InvalidArgument {
		return fmt.Errorf("p4rt: arbitration with %s as device %d, election id %s: %w: the device id must be the switch's (on Stratum, a node id of its chassis config), the election id not 0",
			target, c.deviceID, fmt128(c.electionID()), err)
	}
	return fmt.Errorf("p4rt: arbitration with %s: %w", target, err)
}

// arbitration is the client's arbitration update with election id e.
func (c *Client) arbitration(e *p4v1.Uint128) *p4v1.StreamMessageRequest {
	arb := &p4v1.MasterArbitrationUpdate{DeviceId: c.deviceID, ElectionId: e}
	if c.role != "" {
		arb.Role = &p4v1.Role{Name: c.role}
	}
	return &p4v1.StreamMessageRequest{Update: &p4v1.StreamMessageRequest_Arbitration{Arbitration: arb}}
}

// arbitrated takes in the switch's arbitration update a. It returns the
// election id to arbitrate with again to take primaryship back (nil:
// none), and whether the client's state is settled (primary, or backup it
// will stay).
func (c *Client) arbitrated(a *p4v1.MasterArbitrationUpdate) (next *p4v1.Uint128, settled bool) {
	primary := a.GetStatus().GetCode() == int32(codes.OK)
	c.mu.Lock()
	was, mine, lostBefore := c.primary, c.election, c.lost
	c.primary = primary
	c.mu.Unlock()
	if primary {
		if !was {
			c.log.Info("controller: arbitration", "target", c.target, "primary", true, "election_id", fmt128(mine), "switch_highest", fmt128(a.GetElectionId()))
		}
		if lostBefore != "" {
			c.log.Info("controller: primary on the switch again", "target", c.target, "election_id", fmt128(mine))
		}
		if !was {
			c.setLost("", false)
		}
		return nil, true
	}
	who := primaryOf(a)
	if was || lostBefore == "" {
		c.log.Warn("controller: arbitration", "target", c.target, "primary", false, "election_id", fmt128(mine),
			"switch_highest", fmt128(a.GetElectionId()), "switch_says", a.GetStatus().GetMessage())
	}
	c.mu.Lock()
	if who != "" {
		c.lostWho = who
	}
	who = c.lostWho
	c.mu.Unlock()
	var cause string
	switch {
	case was && who != "":
		cause = fmt.Sprintf("the controller is not primary on the switch at %s: %s took it at %s", c.target, who, time.Now().UTC().Format(time.RFC3339))
	case who != "":
		cause = fmt.Sprintf("the controller is not primary on the switch at %s: %s is (the switch's highest election id is %s, this controller's %s)", c.target, who, fmt128(a.GetElectionId()), fmt128(mine))
	default:
		cause = fmt.Sprintf("the controller is not primary on the switch at %s: its election id %s is below the highest the switch has seen (%s)", c.target, fmt128(mine), fmt128(a.GetElectionId()))
	}
	if was {
		c.log.Warn("controller: lost primaryship of the switch", "target", c.target, "primary", who, "switch_highest", fmt128(a.GetElectionId()))
		c.setLost(cause, true)
	} else if lostBefore == "" {
		c.setLost(cause, false)
	}
	if c.yield {
		if was {
			c.log.Warn("controller: staying backup (YieldPrimary); jobs fail until this controller is restarted", "target", c.target)
		}
		return nil, true
	}
	highest := a.GetElectionId()
	if highest == nil || cmp128(highest, mine) < 0 {
		highest = mine
	}
	next, ok := inc128(highest)
	if !ok {
		c.log.Error("controller: cannot take primaryship back: the switch's highest election id is the largest there is", "target", c.target)
		c.mu.Lock()
		c.retaking = false
		c.mu.Unlock()
		return nil, true
	}
	c.mu.Lock()
	c.election = next
	c.retaking = true
	c.mu.Unlock()
	c.log.Warn("controller: taking primaryship back", "target", c.target, "election_id", fmt128(next), "from", who)
	return next, false
}

// setLost records why the client is not primary ("" when it is) and tells
// OnControl.
func (c *Client) setLost(cause string, taken bool) {
	c.mu.Lock()
	c.lost = cause
	switch {
	case cause == "":
		c.lostWho, c.retaking = "", false
		if c.regained != nil {
			close(c.regained)
			c.regained = nil
		}
	case c.regained == nil:
		c.regained = make(chan struct{})
	}
	c.mu.Unlock()
	if c.onCtl != nil {
		c.onCtl(cause, taken)
	}
}

// AwaitControl returns nil while the client is primary. While it is taking
// primaryship back it waits for that, until ctx is done; otherwise, or if
// that fails, it returns why the client is not primary.
func (c *Client) AwaitControl(ctx context.Context) error {
	c.mu.Lock()
	cause, retaking, regained := c.lost, c.retaking, c.regained
	c.mu.Unlock()
	if cause == "" {
		return nil
	}
	if retaking && regained != nil {
		select {
		case <-regained:
			return nil
		case <-ctx.Done():
		case <-c.done:
		}
	}
	if cause := c.ControlLost(); cause != "" {
		return errors.New(cause)
	}
	return nil
}

// ControlLost says why the client is not primary on the switch: who took
// primaryship and when; "" while it is primary.
func (c *Client) ControlLost() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lost
}

func (c *Client) electionID() *p4v1.Uint128 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.election
}

// retaker spaces out the client's attempts to take primaryship back, so
// that two controllers that both refuse to yield trade it slowly rather
// than in a tight loop.
type retaker struct {
	last time.Time
	wait time.Duration
}

// retakeCalm is how long primaryship must have held for the next retake to
// go at once.
const retakeCalm = 10 * time.Second

func (r *retaker) backoff(now time.Time) time.Duration {
	if r.last.IsZero() || now.Sub(r.last) > retakeCalm {
		r.wait = 0
	} else {
		r.wait = min(max(2*r.wait, 100*time.Millisecond), 5*time.Second)
	}
	r.last = now.Add(r.wait)
	return r.wait
}

// primaryOf names the controller an arbitration update says is primary:
// what the software switch's backup status says ("backup: WHO is primary
// with election id N"), else the election id; "" when there is none.
func primaryOf(a *p4v1.MasterArbitrationUpdate) string {
	if a.GetStatus().GetCode() == int32(codes.NotFound) {
		return ""
	}
	if rest, ok := strings.CutPrefix(a.GetStatus().GetMessage(), "backup: "); ok {
		if who, _, ok := strings.Cut(rest, " is primary with election id "); ok && who != "" {
			return who
		}
	}
	return "a controller with election id " + fmt128(a.GetElectionId())
}

func cmp128(a, b *p4v1.Uint128) int {
	if c := cmp.Compare(a.GetHigh(), b.GetHigh()); c != 0 {
		return c
	}
	return cmp.Compare(a.GetLow(), b.GetLow())
}

// inc128 returns e+1; false when e is the largest 128-bit value.
func inc128(e *p4v1.Uint128) (*p4v1.Uint128, bool) {
	hi, lo := e.GetHigh(), e.GetLow()+1
	if lo == 0 {
		if hi == math.MaxUint64 {
			return nil, false
		}
		hi++
	}
	return &p4v1.Uint128{High: hi, Low: lo}, true
}

func fmt128(e *p4v1.Uint128) string {
	if e == nil {
		return "none"
	}
	if e.GetHigh() == 0 {
		return strconv.FormatUint(e.GetLow(), 10)
	}
	return fmt.Sprintf("%d:%d", e.GetHigh(), e.GetLow())
}

// Primary reports whether the switch last named this client primary.
func (c *Client) Primary() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.primary
}

// Close ends the stream (giving up primacy) and the connection.
func (c *Client) Close() error {
	c.cancel()
	<-c.done
	return c.conn.Close()
}

// DeviceID returns the device this client programs.
func (c *Client) DeviceID() uint64 { return c.deviceID }

// SetPipeline pushes a forwarding pipeline config with VERIFY_AND_COMMIT,
// which clears the switch's forwarding state. A nil info pushes the embedded
// SwitchML P4Info. deviceConfig is the target's compiled program (BMv2 JSON,
// Tofino binary); the software switch needs none.
func (c *Client) SetPipeline(ctx context.Context, info *p4configv1.P4Info, deviceConfig []byte, cookie uint64) error {
	return c.setPipeline(ctx, p4v1.SetForwardingPipelineConfigRequest_VERIFY_AND_COMMIT, info, deviceConfig, cookie)
}

// VerifyPipeline asks the target whether it can run the config, changing
// nothing.
func (c *Client) VerifyPipeline(ctx context.Context, info *p4configv1.P4Info, deviceConfig []byte) error {
	return c.setPipeline(ctx, p4v1.SetForwardingPipelineConfigRequest_VERIFY, info, deviceConfig, 0)
}

// IDs returns the ids of the P4Info in use: that of the last pipeline pushed
// or adopted, the main P4Info's before either.
func (c *Client) IDs() p4info.IDs {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.ids
}

// UseP4Info adopts the ids of info, the P4Info of a pipeline the target
// already runs (when the controller does not push one).
func (c *Client) UseP4Info(info *p4configv1.P4Info) error {
	ids, err := p4info.Resolve(info)
	if err != nil {
		return fmt.Errorf("p4rt: %w", err)
	}
	c.mu.Lock()
	c.ids = ids
	c.mu.Unlock()
	return nil
}

func (c *Client) setPipeline(ctx context.Context, action p4v1.SetForwardingPipelineConfigRequest_Action, info *p4configv1.P4Info, deviceConfig []byte, cookie uint64) error {
	if info == nil {
		var err error
		if info, err = p4info.Load(); err != nil {
			return err
		}
	}
	// Refuse a P4Info the controller cannot drive before the target
	// replaces its pipeline with it.
	ids, err := p4info.Resolve(info)
	if err != nil {
		return fmt.Errorf("p4rt: %w", err)
	}
	cfg := &p4v1.ForwardingPipelineConfig{P4Info: info, P4DeviceConfig: deviceConfig}
	if cookie != 0 {
		cfg.Cookie = &p4v1.ForwardingPipelineConfig_Cookie{Cookie: cookie}
	}
	_, err = c.rt.SetForwardingPipelineConfig(ctx, &p4v1.SetForwardingPipelineConfigRequest{
		DeviceId: c.deviceID, Role: c.role, ElectionId: c.electionID(), Action: action, Config: cfg,
	})
	if err != nil {
		return fmt.Errorf("p4rt: the target refused the pipeline (%v): %w", action, err)
	}
	if action == p4v1.SetForwardingPipelineConfigRequest_VERIFY_AND_COMMIT {
		c.mu.Lock()
		c.ids = ids
		c.mu.Unlock()
	}
	return nil
}

// Pipeline returns the target's committed pipeline config.
func (c *Client) Pipeline(ctx context.Context) (*p4v1.ForwardingPipelineConfig, error) {
	r, err := c.rt.GetForwardingPipelineConfig(ctx, &p4v1.GetForwardingPipelineConfigRequest{DeviceId: c.deviceID})
	if err != nil {
		return nil, fmt.Errorf("p4rt: get pipeline config: %w", err)
	}
	return r.GetConfig(), nil
}

// WriteError is a failed Write batch: the gRPC status and, when the switch
// reported them, one error per update (nil where the update succeeded).
type WriteError struct {
	Status  *status.Status
	Updates []error
}

func (e *WriteError) Error() string {
	for i, u := range e.Updates {
		if u != nil {
			return fmt.Sprintf("controller: write: update %d of %d: %v", i, len(e.Updates), u)
		}
	}
	return fmt.Sprintf("controller: write: %v", e.Status.Err())
}

// Code is the code to act on: the batch's, or the first failed update's.
func (e *WriteError) Code() codes.Code {
	for _, u := range e.Updates {
		if u != nil {
			return status.Code(u)
		}
	}
	return e.Status.Code()
}

// GRPCStatus lets status.Code and status.FromError see the code to act on.
func (e *WriteError) GRPCStatus() *status.Status {
	return status.New(e.Code(), e.Error())
}

// Write sends one batch (CONTINUE_ON_ERROR). A failure is a *WriteError.
func (c *Client) Write(ctx context.Context, updates ...*p4v1.Update) error {
	if len(updates) == 0 {
		return nil
	}
	if cause := c.ControlLost(); cause != "" {
		// The switch would refuse it; say why instead.
		return &WriteError{Status: status.New(codes.PermissionDenied, cause)}
	}
	_, err := c.rt.Write(ctx, &p4v1.WriteRequest{DeviceId: c.deviceID, Role: c.role, ElectionId: c.electionID(), Updates: updates})
	if err == nil {
		return nil
	}
	st := status.Convert(err)
	we := &WriteError{Status: st}
	if st.Code() == codes.Unknown {
		for _, d := range st.Details() {
			if pe, ok := d.(*p4v1.Error); ok {
				var ue error
				if codes.Code(pe.GetCanonicalCode()) != codes.OK {
					ue = status.Error(codes.Code(pe.GetCanonicalCode()), pe.GetMessage())
				}
				we.Updates = append(we.Updates, ue)
			}
		}
	}
	return we
}

// Read returns every entity matching the queries.
func (c *Client) Read(ctx context.Context, queries ...*p4v1.Entity) ([]*p4v1.Entity, error) {
	rc, err := c.rt.Read(ctx, &p4v1.ReadRequest{DeviceId: c.deviceID, Role: c.role, Entities: queries})
	if err != nil {
		return nil, fmt.Errorf("p4rt: read: %w", err)
	}
	var out []*p4v1.Entity
	for {
		r, err := rc.Recv()
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return out, fmt.Errorf("p4rt: read: %w", err)
		}
		out = append(out, r.GetEntities()...)
	}
}

// Done is closed when the client's stream channel ends: the switch is lost
// (StreamError says why) or the client closed.
func (c *Client) Done() <-chan struct{} { return c.done }

// StreamError is why the client's stream channel ended ("stream ended"
// when it gave no reason).
func (c *Client) StreamError() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.streamErr == nil {
		return errors.New("stream ended")
	}
	return c.streamErr
}
