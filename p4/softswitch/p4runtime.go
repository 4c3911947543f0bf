package softswitch

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
	"github.com/switchml/switchml-go/secure"
	statuspb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// APIVersion is the P4Runtime version this service implements.
const APIVersion = "1.5.0"

// P4RuntimeConfig configures a P4Runtime service.
type P4RuntimeConfig struct {
	// DeviceID is the P4Runtime device id requests must carry.
	DeviceID uint64
	// Target is the switch state to program.
	Target Target
	// Lock serialises Target calls with the data path. Nil means the service
	// uses a private mutex (fine when nothing else touches the target).
	Lock sync.Locker
	// Preconfigured starts the device with the embedded P4Info committed, as
	// if a controller had already pushed it. Without it, Read and Write fail
	// with FAILED_PRECONDITION until SetForwardingPipelineConfig.
	Preconfigured bool
	// Logger receives arbitration and pipeline changes; nil means slog.Default().
	Logger *slog.Logger
	// Allow, if set, is who may program the switch: only callers whose
	// verified client certificate it permits (secure.IdentityOf) may
	// arbitrate on the stream channel, Read, Write, and set or get the
	// pipeline config; the others get PERMISSION_DENIED naming them.
	// Capabilities stays open. Nil takes every caller, for a service
	// whose transport verifies no client certificates (no identities).
	Allow *secure.Allow
}

// P4Runtime is a P4Runtime server (p4.v1.P4Runtime) for one device running
// the SwitchML pipeline. It is safe for concurrent use.
type P4Runtime struct {
	p4v1.UnimplementedP4RuntimeServer

	deviceID uint64
	target   Target
	dp       sync.Locker
	log      *slog.Logger
	schema   *schema       // what the pipeline implements, from the embedded P4Info
	allow    *secure.Allow // nil: every caller may program the switch

	mu      sync.Mutex // arbitration, pipeline config and side tables
	roles   map[string]*roleState
	running *p4v1.ForwardingPipelineConfig // committed; nil before the first commit
	saved   *p4v1.ForwardingPipelineConfig // VERIFY_AND_SAVE'd, awaiting COMMIT
	// What the pipeline does not store but P4Runtime reads must echo.
	workerMeta map[WorkerKey]entryMeta
	replyMeta  map[ReplyKey]entryMeta
	groupMeta  map[uint16]groupMeta
	// Counter values at the last reset or write: reads report the difference,
	// since the pipeline's counters only grow.
	counterBase []uint64
}

type entryMeta struct {
	controllerMetadata uint64
	metadata           []byte
}

type groupMeta struct {
	metadata  []byte
	portBytes bool // replicas were given as `port` bytes rather than egress_port
}

// NewP4Runtime returns a P4Runtime service for cfg.Target.
func NewP4Runtime(cfg P4RuntimeConfig) (*P4Runtime, error) {
	if cfg.Target == nil {
		return nil, errors.New("softswitch: P4RuntimeConfig.Target is nil")
	}
	info, err := p4info.Load()
	if err != nil {
		return nil, err
	}
	sch, err := newSchema(info)
	if err != nil {
		return nil, err
	}
	s := &P4Runtime{
		deviceID:   cfg.DeviceID,
		target:     cfg.Target,
		dp:         cfg.Lock,
		log:        cfg.Logger,
		schema:     sch,
		allow:      cfg.Allow,
		roles:      map[string]*roleState{},
		workerMeta: map[WorkerKey]entryMeta{},
		replyMeta:  map[ReplyKey]entryMeta{},
		groupMeta:  map[uint16]groupMeta{},
	}
	if s.dp == nil {
		s.dp = &sync.Mutex{}
	}
	if s.log == nil {
		s.log = slog.Default()
	}
	s.dp.Lock()
	s.counterBase = s.target.Counters(nil)
	s.dp.Unlock()
	if cfg.Preconfigured {
		s.running = &p4v1.ForwardingPipelineConfig{P4Info: info}
	}
	return s, nil
}

// Register adds the service to a gRPC server.
func (s *P4Runtime) Register(g grpc.ServiceRegistrar) {
	p4v1.RegisterP4RuntimeServer(g, s)
}

// DeviceID returns the device id the service answers to.
func (s *P4Runtime) DeviceID() uint64 { return s.deviceID }

// Allowed says who may program the switch (nil: every caller).
func (s *P4Runtime) Allowed() *secure.Allow { return s.allow }

// authorize refuses a caller the service's Allow does not permit, naming
// the caller's identity, what it tried and who may.
func (s *P4Runtime) authorize(ctx context.Context, what string) error {
	if s.allow == nil {
		return nil
	}
	id := secure.IdentityOf(ctx)
	if s.allow.Permits(id) {
		return nil
	}
	s.log.Warn("p4runtime: refused a caller", "device", s.deviceID, "caller", id.String(), "call", what)
	return status.Errorf(codes.PermissionDenied, "%s may not %s on this switch: P4Runtime control is for %s (certificates signed by the switch's client CA; see its P4RuntimeAllow)",
		id.String(), what, s.allow.String())
}

// ---- arbitration ----

// stream is one live StreamChannel.
type stream struct {
	out        chan *p4v1.StreamMessageResponse
	arbitrated bool
	role       string
	election   *p4v1.Uint128 // nil: no election id (can never become primary)
	who        string        // the caller's identity, named to the backups
}

type roleState struct {
	streams map[*stream]struct{}
	primary *stream
	highest *p4v1.Uint128 // highest election id ever seen; nil before any primary
}

func cmp128(a, b *p4v1.Uint128) int {
	switch {
	case a.GetHigh() != b.GetHigh():
		if a.GetHigh() < b.GetHigh() {
			return -1
		}
		return 1
	case a.GetLow() != b.GetLow():
		if a.GetLow() < b.GetLow() {
			return -1
		}
		return 1
	}
	return 0
}

func fmt128(a *p4v1.Uint128) string {
	if a == nil {
		return "none"
	}
	if a.GetHigh() == 0 {
		return fmt.Sprint(a.GetLow())
	}
	return fmt.Sprintf("%d:%d", a.GetHigh(), a.GetLow())
}

// StreamChannel implements p4.v1.P4Runtime: arbitration; packet I/O and
// digests are not part of this pipeline and are answered with a StreamError.
// Callers: the identities P4RuntimeConfig.Allow permits (all without it).
func (s *P4Runtime) StreamChannel(ss p4v1.P4Runtime_StreamChannelServer) error {
	// An unauthorised caller is refused at its first message, whatever it
	// is, before it joins any role's arbitration.
	refused := s.authorize(ss.Context(), "arbitrate (StreamChannel)")
	st := &stream{out: make(chan *p4v1.StreamMessageResponse, 256), who: secure.IdentityOf(ss.Context()).String()}
	quit := make(chan struct{})
	senderDone := make(chan struct{})
	go func() {
		defer close(senderDone)
		for {
			select {
			case m := <-st.out:
				if err := ss.Send(m); err != nil {
					return
				}
			case <-quit:
				// Flush what is queued (e.g. the answer to the last
				// arbitration) before the handler returns.
				for {
					select {
					case m := <-st.out:
						if ss.Send(m) != nil {
							return
						}
					default:
						return
					}
				}
			}
		}
	}()
	defer func() {
		s.leave(st)
		close(quit)
		<-senderDone
	}()
	for {
		req, err := ss.Recv()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		if refused != nil {
			return refused
		}
		switch u := req.GetUpdate().(type) {
		case *p4v1.StreamMessageRequest_Arbitration:
			if err := s.arbitrate(st, u.Arbitration); err != nil {
				return err
			}
		case *p4v1.StreamMessageRequest_Packet:
			s.send(st, streamError(codes.Unimplemented, "this pipeline has no CPU port: packet-out is not supported",
				&p4v1.StreamError_PacketOut{PacketOut: &p4v1.PacketOutError{PacketOut: u.Packet}}))
		case *p4v1.StreamMessageRequest_DigestAck:
			s.send(st, streamError(codes.Unimplemented, "this pipeline declares no digests",
				&p4v1.StreamError_DigestListAck{DigestListAck: &p4v1.DigestListAckError{DigestListAck: u.DigestAck}}))
		default:
			s.send(st, streamError(codes.Unimplemented, "unsupported stream message",
				&p4v1.StreamError_Other{Other: &p4v1.StreamOtherError{}}))
		}
	}
}

func streamError(code codes.Code, msg string, details any) *p4v1.StreamMessageResponse {
	e := &p4v1.StreamError{CanonicalCode: int32(code), Message: msg, Space: errorSpace}
	switch d := details.(type) {
	case *p4v1.StreamError_PacketOut:
		e.Details = d
	case *p4v1.StreamError_DigestListAck:
		e.Details = d
	case *p4v1.StreamError_Other:
		e.Details = d
	}
	return &p4v1.StreamMessageResponse{Update: &p4v1.StreamMessageResponse_Error{Error: e}}
}

// send queues m for st without blocking: a controller that stops reading its
// stream must not stall arbitration for everyone else.
func (s *P4Runtime) send(st *stream, m *p4v1.StreamMessageResponse) {
	select {
	case st.out <- m:
	default:
		s.log.Warn("p4runtime: stream not reading, dropping message")
	}
}

func roleName(r *p4v1.Role) string {
	if r == nil {
		return ""
	}
	if r.GetName() != "" {
		return r.GetName()
	}
	//lint:ignore SA1019 deprecated ids still name roles for old clients
	if id := r.GetId(); id != 0 {
		return fmt.Sprintf("id:%d", id)
	}
	return ""
}

// arbitrate applies the rules of the P4Runtime specification (section
// "Rules for Handling MasterArbitrationUpdate Messages"). A returned error
// terminates the stream.
func (s *P4Runtime) arbitrate(st *stream, m *p4v1.MasterArbitrationUpdate) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	role := roleName(m.GetRole())
	if m.GetRole().GetConfig() != nil {
		// The specification leaves a role config's meaning to the target;
		// this switch has no per-role scopes to enforce, so it refuses
		// rather than pretend to honour one.
		return status.Errorf(codes.InvalidArgument, "role %q: this switch cannot honour role configs (it has no per-role access scopes); leave Role.config unset, which gives the role full pipeline access", role)
	}
	if role != "" {
		// Every role would have the whole pipeline, and a controller of
		// the default role would never see another role's primary write
		// beside it: only the default role arbitrates.
		return status.Errorf(codes.PermissionDenied, "role %q: this switch serves the default role only (every role would have full pipeline access, unseen by the default role's controller); arbitrate without a role", role)
	}
	if st.arbitrated {
		if m.GetDeviceId() != s.deviceID {
			return status.Errorf(codes.FailedPrecondition, "stream is bound to device %d, arbitration names device %d", s.deviceID, m.GetDeviceId())
		}
		if role != st.role {
			return status.Errorf(codes.FailedPrecondition, "stream is bound to role %q; open a new stream to change role to %q", st.role, role)
		}
	} else if m.GetDeviceId() != s.deviceID {
		return status.Errorf(codes.NotFound, "unknown device id %d (this switch is device %d)", m.GetDeviceId(), s.deviceID)
	}
	rs := s.roles[role]
	if rs == nil {
		rs = &roleState{streams: map[*stream]struct{}{}}
		s.roles[role] = rs
	}
	if e := m.GetElectionId(); e != nil {
		for other := range rs.streams {
			if other != st && other.election != nil && cmp128(other.election, e) == 0 {
				return status.Errorf(codes.InvalidArgument, "election id %s is already used by another controller of role %q", fmt128(e), role)
			}
		}
	}
	st.arbitrated = true
	st.role = role
	st.election = m.GetElectionId()
	rs.streams[st] = struct{}{}

	wasPrimary := rs.primary == st
	if st.election != nil && (rs.highest == nil || cmp128(st.election, rs.highest) >= 0) {
		if rs.primary != st {
			s.log.Info("p4runtime: new primary", "device", s.deviceID, "role", role, "election_id", fmt128(st.election))
		}
		rs.primary = st
		rs.highest = st.election
		s.notifyAll(rs, role)
		return nil
	}
	if wasPrimary {
		// The primary downgraded itself: nobody is primary now.
		rs.primary = nil
		s.notifyAll(rs, role)
		return nil
	}
	s.notify(rs, role, st)
	return nil
}

func (s *P4Runtime) notifyAll(rs *roleState, role string) {
	for st := range rs.streams {
		s.notify(rs, role, st)
	}
}

func (s *P4Runtime) notify(rs *roleState, role string, st *stream) {
	u := &p4v1.MasterArbitrationUpdate{DeviceId: s.deviceID}
	if role != "" {
		u.Role = &p4v1.Role{Name: role}
	}
	if rs.highest != nil {
		u.ElectionId = proto.Clone(rs.highest).(*p4v1.Uint128)
	}
	switch {
	case rs.primary == st:
		u.Status = &statuspb.Status{Code: int32(codes.OK), Message: "primary"}
	case rs.primary != nil:
		u.Status = &statuspb.Status{Code: int32(codes.AlreadyExists), Message: fmt.Sprintf("backup: %s is primary with election id %s", rs.primary.who, fmt128(rs.primary.election))}
	default:
		u.Status = &statuspb.Status{Code: int32(codes.NotFound), Message: "backup: no primary"}
	}
	s.send(st, &p4v1.StreamMessageResponse{Update: &p4v1.StreamMessageResponse_Arbitration{Arbitration: u}})
}

// leave forgets a closed stream; if it was the primary, the others are told
// there is none (a new primary must present an election id at least as high).
func (s *P4Runtime) leave(st *stream) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !st.arbitrated {
		return
	}
	rs := s.roles[st.role]
	if rs == nil {
		return
	}
	delete(rs.streams, st)
	if rs.primary == st {
		rs.primary = nil
		s.log.Info("p4runtime: primary disconnected", "device", s.deviceID, "role", st.role)
		s.notifyAll(rs, st.role)
	}
}

// checkPrimary verifies that a mutating request comes from the primary of its
// role. Callers hold s.mu.
func (s *P4Runtime) checkPrimary(device uint64, role string, election *p4v1.Uint128) error {
	if device != s.deviceID {
		return status.Errorf(codes.NotFound, "unknown device id %d (this switch is device %d)", device, s.deviceID)
	}
	rs := s.roles[role]
	if rs == nil {
		return status.Errorf(codes.NotFound, "role %q has no controller: open a StreamChannel and arbitrate first", role)
	}
	if rs.primary == nil {
		return status.Errorf(codes.PermissionDenied, "role %q has no primary controller", role)
	}
	if election == nil || cmp128(election, rs.primary.election) != 0 {
		return status.Errorf(codes.PermissionDenied, "election id %s is not the primary's (%s): only the primary may write",
			fmt128(election), fmt128(rs.primary.election))
	}
	return nil
}

// ---- pipeline config ----

// SetForwardingPipelineConfig implements p4.v1.P4Runtime. The pipeline is
// fixed, so a config is accepted only if its P4Info describes exactly the
// entities this switch implements (names, ids, match fields, parameters,
// widths); table and register sizes are not compared. The opaque device config
// is stored and returned as is. Callers: the primary of the request's role,
// among the identities P4RuntimeConfig.Allow permits.
func (s *P4Runtime) SetForwardingPipelineConfig(ctx context.Context, req *p4v1.SetForwardingPipelineConfigRequest) (*p4v1.SetForwardingPipelineConfigResponse, error) {
	if err := s.authorize(ctx, "SetForwardingPipelineConfig"); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.checkPrimary(req.GetDeviceId(), req.GetRole(), req.GetElectionId()); err != nil {
		return nil, err
	}
	cfg := req.GetConfig()
	verify := func() error {
		if cfg == nil {
			return status.Error(codes.InvalidArgument, "no ForwardingPipelineConfig given")
		}
		if cfg.GetP4Info() == nil {
			return status.Error(codes.InvalidArgument, "ForwardingPipelineConfig has no p4info")
		}
		if diffs := s.schema.diff(cfg.GetP4Info()); len(diffs) > 0 {
			return status.Errorf(codes.InvalidArgument, "P4Info does not match the SwitchML pipeline this switch implements: %s", joinDiffs(diffs))
		}
		return nil
	}
	switch req.GetAction() {
	case p4v1.SetForwardingPipelineConfigRequest_VERIFY:
		return &p4v1.SetForwardingPipelineConfigResponse{}, verify()
	case p4v1.SetForwardingPipelineConfigRequest_VERIFY_AND_SAVE:
		if err := verify(); err != nil {
			return nil, err
		}
		s.saved = proto.Clone(cfg).(*p4v1.ForwardingPipelineConfig)
	case p4v1.SetForwardingPipelineConfigRequest_VERIFY_AND_COMMIT:
		if err := verify(); err != nil {
			return nil, err
		}
		s.clearForwardingState()
		s.running = proto.Clone(cfg).(*p4v1.ForwardingPipelineConfig)
		s.saved = nil
		s.log.Info("p4runtime: pipeline committed, forwarding state cleared", "device", s.deviceID, "cookie", cfg.GetCookie().GetCookie())
	case p4v1.SetForwardingPipelineConfigRequest_COMMIT:
		if cfg != nil {
			return nil, status.Error(codes.InvalidArgument, "COMMIT takes no config: it commits the last VERIFY_AND_SAVE'd one")
		}
		if s.saved == nil {
			return nil, status.Error(codes.NotFound, "no saved config to commit (send VERIFY_AND_SAVE first)")
		}
		// Writes made since the save already apply to this pipeline (the
		// saved P4Info is structurally identical), so the state is kept.
		s.running, s.saved = s.saved, nil
	case p4v1.SetForwardingPipelineConfigRequest_RECONCILE_AND_COMMIT:
		if err := verify(); err != nil {
			return nil, err
		}
		// Same pipeline structure: the forwarding state is preserved as is.
		s.running = proto.Clone(cfg).(*p4v1.ForwardingPipelineConfig)
		s.saved = nil
	default:
		return nil, status.Errorf(codes.InvalidArgument, "unsupported action %v", req.GetAction())
	}
	return &p4v1.SetForwardingPipelineConfigResponse{}, nil
}

// clearForwardingState empties tables and groups and zeroes the pool and the
// counters, as VERIFY_AND_COMMIT requires. Callers hold s.mu.
// registerClearer is implemented by targets that can zero all their
// registers at once.
type registerClearer interface{ ClearRegisters() }

func (s *P4Runtime) clearForwardingState() {
	s.dp.Lock()
	defer s.dp.Unlock()
	var wk []WorkerKey
	s.target.Workers(func(k WorkerKey, _ Worker) bool { wk = append(wk, k); return true })
	for _, k := range wk {
		_ = s.target.DeleteWorker(k)
	}
	var rk []ReplyKey
	s.target.Replies(func(k ReplyKey, _ Reply) bool { rk = append(rk, k); return true })
	for _, k := range rk {
		_ = s.target.DeleteReply(k)
	}
	var gk []uint16
	s.target.MulticastGroups(func(id uint16, _ []Replica) bool { gk = append(gk, id); return true })
	for _, id := range gk {
		_ = s.target.DeleteMulticastGroup(id)
	}
	if c, ok := s.target.(registerClearer); ok {
		// Millions of value cells: one memclr instead of a call per cell.
		c.ClearRegisters()
	} else {
		for _, r := range s.schema.registers {
			n := s.target.RegisterSize(r.name)
			for i := 0; i < n; i++ {
				_ = s.target.WriteRegister(r.name, i, 0)
			}
		}
	}
	s.clearKeys()
	s.counterBase = s.target.Counters(s.counterBase[:0])
	s.workerMeta = map[WorkerKey]entryMeta{}
	s.replyMeta = map[ReplyKey]entryMeta{}
	s.groupMeta = map[uint16]groupMeta{}
}

// GetForwardingPipelineConfig implements p4.v1.P4Runtime. Callers: the
// identities P4RuntimeConfig.Allow permits, primary or backup.
func (s *P4Runtime) GetForwardingPipelineConfig(ctx context.Context, req *p4v1.GetForwardingPipelineConfigRequest) (*p4v1.GetForwardingPipelineConfigResponse, error) {
	if err := s.authorize(ctx, "GetForwardingPipelineConfig"); err != nil {
		return nil, err
	}
	if req.GetDeviceId() != s.deviceID {
		return nil, status.Errorf(codes.NotFound, "unknown device id %d (this switch is device %d)", req.GetDeviceId(), s.deviceID)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.running == nil {
		return nil, status.Error(codes.FailedPrecondition, "no forwarding pipeline config has been committed")
	}
	out := &p4v1.ForwardingPipelineConfig{}
	if c := s.running.GetCookie(); c != nil {
		out.Cookie = &p4v1.ForwardingPipelineConfig_Cookie{Cookie: c.GetCookie()}
	}
	switch req.GetResponseType() {
	case p4v1.GetForwardingPipelineConfigRequest_ALL:
		out.P4Info = proto.Clone(s.running.GetP4Info()).(*p4configv1.P4Info)
		out.P4DeviceConfig = append([]byte(nil), s.running.GetP4DeviceConfig()...)
	case p4v1.GetForwardingPipelineConfigRequest_COOKIE_ONLY:
	case p4v1.GetForwardingPipelineConfigRequest_P4INFO_AND_COOKIE:
		out.P4Info = proto.Clone(s.running.GetP4Info()).(*p4configv1.P4Info)
	case p4v1.GetForwardingPipelineConfigRequest_DEVICE_CONFIG_AND_COOKIE:
		out.P4DeviceConfig = append([]byte(nil), s.running.GetP4DeviceConfig()...)
	default:
		return nil, status.Errorf(codes.InvalidArgument, "unknown response_type %v", req.GetResponseType())
	}
	return &p4v1.GetForwardingPipelineConfigResponse{Config: out}, nil
}

// Capabilities implements p4.v1.P4Runtime; any caller the transport lets
// in may ask.
func (s *P4Runtime) Capabilities(context.Context, *p4v1.CapabilitiesRequest) (*p4v1.CapabilitiesResponse, error) {
	return &p4v1.CapabilitiesResponse{P4RuntimeApiVersion: APIVersion}, nil
}
