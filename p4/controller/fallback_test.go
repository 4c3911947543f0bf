package controller

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/switchml/switchml-go/jobpb"
)

// TestStoppingControllerAbortsNoJob: a controller that stops ends every
// rank's lease at once; that is no rank's death, so no job is aborted and
// no rank hears of one (with FallbackOnLoss a rank told its peer was lost
// would stay behind while the others move to the ring).
func TestStoppingControllerAbortsNoJob(t *testing.T) {
	h := newJobHarness(t, testSlots)
	lis, _, stop, err := listenJobs(Config{Listen: "127.0.0.1:0"}, h.svc)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	overTCP := &jobHarness{svc: h.svc, jobs: jobpb.NewJobServiceClient(conn), sw: h.sw, secrets: map[string][]byte{}}
	streams, _, _ := joined(t, overTCP, "kept", 3)
	stop()
	// Wait until the service has heard every lease end.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for {
		h.svc.mu.Lock()
		open := len(h.svc.waiters)
		h.svc.mu.Unlock()
		if open == 0 {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%d leases still open after the server stopped", open)
		case <-time.After(10 * time.Millisecond):
		}
	}
	if h.svc.Jobs()["kept"] == nil {
		t.Fatal("stopping the server aborted the job: its ranks were taken for lost")
	}
	for r, st := range streams {
		if ev, err := st.Recv(); err == nil {
			t.Errorf("rank %d heard %v, want its lease to end without an event", r, ev)
		}
	}
}
