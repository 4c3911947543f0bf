// Package controller is the SwitchML controller: a P4Runtime client that
// programs any target running the SwitchML pipeline (the software switch,
// BMv2 or a Tofino with the matching program), and the job service workers
// register with (controllerpb.JobService).
//
// The job service is a deterministic core (core.go: jobs, partitions,
// leases, rounds, adoption; no I/O, goroutines or clock) driven by
// JobService, which serves the RPCs, carries the core's decisions to the
// switch and feeds it the switch's reports and the time. Run is the daemon:
// it connects to the switch, serves the job service and reconnects when the
// switch is lost. What operators see, the Status RPC and the Prometheus
// collector (JobService.Collector), is read from the core under the
// driver's lock; the switch's counters are read after, outside it.
package controller

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"

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
}

// Client is a P4Runtime client holding a stream channel with its arbitration.
// It is safe for concurrent use.
type Client struct {
	conn     *grpc.ClientConn
	rt       p4v1.P4RuntimeClient
	deviceID uint64
	election *p4v1.Uint128
	role     string
	log      *slog.Logger
	cancel   context.CancelFunc
	done     chan struct{} // closed when the stream ends

	mu        sync.Mutex
	primary   bool
	streamErr error
	ids       p4info.IDs // of the pipeline this client pushed or adopted
	regs      RegisterBackend
	keys      bool // the switch checks tags: jobs' keys go with their entries (CheckAuth)
}

// ErrNotPrimary is returned by Dial's caller checks and helpers that need to
// write while another controller is primary.
var ErrNotPrimary = errors.New("controller: not the primary controller of the switch")

// Dial connects to the target, opens the stream channel and arbitrates. It
// returns once the switch has answered the arbitration, whether this client
// became primary or backup (see Primary); it waits for the target to come up
// until ctx is done.
func Dial(ctx context.Context, cfg ClientConfig) (*Client, error) {
	if cfg.Target == "" {
		return nil, errors.New("controller: no P4Runtime target address")
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
		return nil, fmt.Errorf("controller: P4Runtime target %q: %w", cfg.Target, err)
	}
	sctx, cancel := context.WithCancel(context.Background())
	c := &Client{
		conn: conn, rt: p4v1.NewP4RuntimeClient(conn), deviceID: cfg.DeviceID,
		election: &p4v1.Uint128{Low: cfg.ElectionID}, role: cfg.Role, log: cfg.Logger,
		cancel: cancel, done: make(chan struct{}), ids: p4info.DefaultIDs(),
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
		return nil, fmt.Errorf("controller: P4Runtime target %s did not answer arbitration: %w", cfg.Target, ctx.Err())
	}
}

// run owns the stream channel: it arbitrates, then follows arbitration
// updates until the stream ends. The first answer (or failure) goes to first.
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
		report(fmt.Errorf("controller: open stream to %s: %w", target, err))
		return
	}
	arb := &p4v1.MasterArbitrationUpdate{DeviceId: c.deviceID, ElectionId: c.election}
	if c.role != "" {
		arb.Role = &p4v1.Role{Name: c.role}
	}
	if err := st.Send(&p4v1.StreamMessageRequest{Update: &p4v1.StreamMessageRequest_Arbitration{Arbitration: arb}}); err != nil {
		report(fmt.Errorf("controller: arbitration with %s: %w", target, err))
		return
	}
	for {
		m, err := st.Recv()
		if err != nil {
			if err == io.EOF {
				err = errors.New("stream closed by the switch")
			}
			c.mu.Lock()
			c.primary, c.streamErr = false, err
			c.mu.Unlock()
			report(fmt.Errorf("controller: arbitration with %s: %w", target, err))
			if ctx.Err() == nil {
				c.log.Warn("controller: P4Runtime stream ended", "target", target, "err", err)
			}
			return
		}
		if a := m.GetArbitration(); a != nil {
			primary := a.GetStatus().GetCode() == int32(codes.OK)
			c.mu.Lock()
			changed := c.primary != primary
			c.primary = primary
			c.mu.Unlock()
			if changed {
				c.log.Info("controller: arbitration", "target", target, "primary", primary,
					"election_id", c.election.GetLow(), "switch_highest", a.GetElectionId().GetLow())
			}
			report(nil)
		} else if e := m.GetError(); e != nil {
			c.log.Warn("controller: stream error from switch", "code", codes.Code(e.GetCanonicalCode()), "msg", e.GetMessage())
		}
	}
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
		return fmt.Errorf("controller: %w", err)
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
		return fmt.Errorf("controller: %w", err)
	}
	cfg := &p4v1.ForwardingPipelineConfig{P4Info: info, P4DeviceConfig: deviceConfig}
	if cookie != 0 {
		cfg.Cookie = &p4v1.ForwardingPipelineConfig_Cookie{Cookie: cookie}
	}
	_, err = c.rt.SetForwardingPipelineConfig(ctx, &p4v1.SetForwardingPipelineConfigRequest{
		DeviceId: c.deviceID, Role: c.role, ElectionId: c.election, Action: action, Config: cfg,
	})
	if err != nil {
		return fmt.Errorf("controller: the target refused the pipeline (%v): %w", action, err)
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
		return nil, fmt.Errorf("controller: get pipeline config: %w", err)
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
	_, err := c.rt.Write(ctx, &p4v1.WriteRequest{DeviceId: c.deviceID, Role: c.role, ElectionId: c.election, Updates: updates})
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
		return nil, fmt.Errorf("controller: read: %w", err)
	}
	var out []*p4v1.Entity
	for {
		r, err := rc.Recv()
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return out, fmt.Errorf("controller: read: %w", err)
		}
		out = append(out, r.GetEntities()...)
	}
}
