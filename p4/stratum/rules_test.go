package stratum_test

import (
	"context"
	"testing"
	"time"

	p4v1 "github.com/p4lang/p4runtime/go/p4/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/switchml/switchml-go/p4/controller/p4rt"
	"github.com/switchml/switchml-go/p4/p4info"
	"github.com/switchml/switchml-go/p4/tna"
)

// rawClient is a P4Runtime client that sends what it is told, as a
// controller that breaks Stratum's rules would.
type rawClient struct {
	rt p4v1.P4RuntimeClient
}

func dialRaw(t *testing.T, target string) rawClient {
	t.Helper()
	conn, err := grpc.NewClient(target, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return rawClient{p4v1.NewP4RuntimeClient(conn)}
}

// arbitrate opens a stream, sends one arbitration and returns the first
// answer or the error that ended the stream. The stream stays open until
// ctx ends.
func (c rawClient) arbitrate(ctx context.Context, device uint64, election uint64) (*p4v1.MasterArbitrationUpdate, error) {
	st, err := c.rt.StreamChannel(ctx)
	if err != nil {
		return nil, err
	}
	var e *p4v1.Uint128
	if election != 0 {
		e = &p4v1.Uint128{Low: election}
	}
	if err := st.Send(&p4v1.StreamMessageRequest{Update: &p4v1.StreamMessageRequest_Arbitration{Arbitration: &p4v1.MasterArbitrationUpdate{DeviceId: device, ElectionId: e}}}); err != nil {
		return nil, err
	}
	m, err := st.Recv()
	if err != nil {
		return nil, err
	}
	return m.GetArbitration(), nil
}

// resetCount is a valid update: pool_count[0] := 0.
func resetCount(t *testing.T, rec *recorder) *p4v1.Update {
	return p4rt.RegisterUpdate(rec.id(t, p4info.RegisterPoolCount), 0, 0)
}

// The stream's arbitration is refused as P4Service::StreamChannel refuses
// it: a device id of zero, a device id that is not the node's (the
// chassis config's nodes { id }), an election id of zero. A controller
// with another --device-id than the node's does not get past Dial, and
// its error names the id.
func TestStratumRefusesArbitration(t *testing.T) {
	rec := newRecorder(t, tna.P4InfoText)
	target := rec.serve(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	raw := dialRaw(t, target)
	for _, c := range []struct {
		name             string
		device, election uint64
		want             string
	}{
		{"device id 0", 0, 1, "Invalid node (aka device) ID."},
		{"device id not the node's", 2, 1, "Node with ID 2 is unknown."},
		{"election id 0", recorderNode, 0, "Invalid election ID."},
	} {
		sctx, stop := context.WithCancel(ctx)
		a, err := raw.arbitrate(sctx, c.device, c.election)
		stop()
		if status.Code(err) != codes.InvalidArgument || !errContains(err, c.want) {
			t.Errorf("%s: answer %v, error %v; want InvalidArgument %q", c.name, a, err, c.want)
		}
	}
	_, err := p4rt.Dial(ctx, p4rt.ClientConfig{Target: target, DeviceID: 2, Logger: quiet})
	if !errContains(err, "Node with ID 2 is unknown") || !errContains(err, "device id") {
		t.Errorf("a controller with --device-id 2 on node %d: %v, want the switch's refusal naming the device id", recorderNode, err)
	}
}

// Writes, pipeline pushes and reads are refused as P4Service refuses them:
// device id zero, election id zero, and a write or push that does not come
// from the primary's connection with the primary's election id.
func TestStratumRefusesWrites(t *testing.T) {
	rec := newRecorder(t, tna.P4InfoText)
	target := rec.serve(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	primary, err := p4rt.Dial(ctx, p4rt.ClientConfig{Target: target, ElectionID: 5, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer primary.Close()
	devcfg := packed(t, "tofino")
	if err := primary.SetPipeline(ctx, rec.info, devcfg, 0); err != nil {
		t.Fatal(err)
	}
	// The primary writes.
	if err := primary.Write(ctx, resetCount(t, rec)); err != nil {
		t.Fatalf("the primary's write: %v", err)
	}

	// A backup: a second connection that arbitrated with a lower id.
	backup := dialRaw(t, target)
	sctx, stop := context.WithCancel(ctx)
	defer stop()
	a, err := backup.arbitrate(sctx, recorderNode, 3)
	if err != nil || status.FromProto(a.GetStatus()).Code() == codes.OK {
		t.Fatalf("second controller with election id 3: %v, %v; want a backup's answer", a, err)
	}
	// A connection that never arbitrated.
	stranger := dialRaw(t, target)

	write := func(c rawClient, device, election uint64) error {
		req := &p4v1.WriteRequest{DeviceId: device, Updates: []*p4v1.Update{resetCount(t, rec)}}
		if election != 0 {
			req.ElectionId = &p4v1.Uint128{Low: election}
		}
		_, err := c.rt.Write(ctx, req)
		return err
	}
	for _, c := range []struct {
		name string
		err  error
		code codes.Code
		want string
	}{
		{"write with device id 0", write(backup, 0, 5), codes.InvalidArgument, "Invalid device ID."},
		{"write to another node", write(backup, 2, 5), codes.InvalidArgument, "Node with ID 2 is unknown."},
		{"write without election id", write(backup, recorderNode, 0), codes.InvalidArgument, "Invalid election ID."},
		{"write from the backup", write(backup, recorderNode, 3), codes.PermissionDenied, "Write from non-master is not permitted."},
		{"write with the primary's election id from another connection", write(stranger, recorderNode, 5), codes.PermissionDenied, "Write from non-master is not permitted."},
		{"pipeline push from the backup", func() error {
			_, err := backup.rt.SetForwardingPipelineConfig(ctx, &p4v1.SetForwardingPipelineConfigRequest{DeviceId: recorderNode, ElectionId: &p4v1.Uint128{Low: 3},
				Action: p4v1.SetForwardingPipelineConfigRequest_VERIFY_AND_COMMIT, Config: &p4v1.ForwardingPipelineConfig{P4Info: rec.info, P4DeviceConfig: devcfg}})
			return err
		}(), codes.PermissionDenied, "SetForwardingPipelineConfig from non-master is not permitted."},
		{"read with device id 0", func() error {
			rc, err := stranger.rt.Read(ctx, &p4v1.ReadRequest{Entities: []*p4v1.Entity{{Entity: &p4v1.Entity_CounterEntry{CounterEntry: &p4v1.CounterEntry{CounterId: primary.IDs().CounterStats}}}}})
			if err != nil {
				return err
			}
			_, err = rc.Recv()
			return err
		}(), codes.InvalidArgument, "Invalid device ID."},
	} {
		if status.Code(c.err) != c.code || !errContains(c.err, c.want) {
			t.Errorf("%s: %v, want %v %q", c.name, c.err, c.code, c.want)
		}
	}
	// The backup's refused write changed nothing: the primary still writes.
	if err := primary.Write(ctx, resetCount(t, rec)); err != nil {
		t.Errorf("the primary's write after the refusals: %v", err)
	}
}

// The pushed pipeline's P4Info ids reach BF Runtime objects by the mapping
// BfrtIdMapper builds from the device config's bfrt.json: pool_count's
// P4Info id 0x1687c021 is bf-p4c's BF Runtime register 0x8b87c021 (by
// name, "pipe.SwitchMLIngress.pool_count"), the workers table keeps its
// id. A P4Info whose objects the device config's bfrt.json lacks (the
// Tofino 2 program's, pushed with a Tofino 1 build) is refused at the push,
// naming the first object not found.
func TestStratumMapsP4InfoToBfrt(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	rec := newRecorder(t, tna.P4InfoText)
	cl, err := p4rt.Dial(ctx, p4rt.ClientConfig{Target: rec.serve(t), Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if err := cl.SetPipeline(ctx, rec.info, packed(t, "tofino"), 0); err != nil {
		t.Fatal(err)
	}
	rec.mu.Lock()
	count, workers := rec.mapped[rec.id(t, p4info.RegisterPoolCount)], rec.mapped[rec.id(t, p4info.TableWorkers)]
	rec.mu.Unlock()
	if rec.id(t, p4info.RegisterPoolCount) != 0x1687c021 || count == nil || count.ID != 0x8b87c021 || count.Name != "pipe.SwitchMLIngress.pool_count" {
		t.Errorf("pool_count (P4Info id %#x) maps to %+v, want BF Runtime register 0x8b87c021", rec.id(t, p4info.RegisterPoolCount), count)
	}
	if workers == nil || workers.ID != rec.id(t, p4info.TableWorkers) {
		t.Errorf("workers maps to %+v, want the same id", workers)
	}

	rec2 := newRecorder(t, tna.P4InfoTofino2Text)
	cl2, err := p4rt.Dial(ctx, p4rt.ClientConfig{Target: rec2.serve(t), Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer cl2.Close()
	err = cl2.SetPipeline(ctx, rec2.info, packed(t, "tofino"), 0)
	if !errContains(err, "Unable to find bfrt ID for P4Info entity SwitchMLIngress.pool_tag") {
		t.Errorf("Tofino 2 P4Info with a Tofino 1 bfrt.json: %v, want the push refused naming pool_tag", err)
	}
	if err := cl2.Write(ctx, resetCount(t, rec2)); !errContains(err, "no pipeline") {
		t.Errorf("write with no pipeline: %v, want it refused", err)
	}
}
