package softswitch_test

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/switchml/switchml-go/p4/controller"
	"github.com/switchml/switchml-go/p4/pipeline"
	"github.com/switchml/switchml-go/p4/softswitch"
	"github.com/switchml/switchml-go/switchml"
)

// probedSwitch is a software switch whose P4Runtime service and data plane
// listen on 127.0.0.9, the data plane on a free port rather than the
// default 48864: a controller given no --dataplane hands out
// 127.0.0.9:48864, where no switch answers.
func probedSwitch(t *testing.T, ctx context.Context) *softswitch.Switch {
	t.Helper()
	sw, err := softswitch.Listen(softswitch.Config{Dataplane: "127.0.0.9:0", P4Runtime: "127.0.0.9:0",
		Pipeline: pipeline.Config{Slots: 512, MaxElements: 256, MaxWorkers: 32}})
	if err != nil {
		t.Skipf("no loopback address 127.0.0.9 to bind the switch to: %v", err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = sw.Serve(runCtx) }()
	t.Cleanup(func() { stop(); <-done })
	return sw
}

// runProbingController runs a controller of sw as the CLI runs it
// (ProbeDataplane), handing out dataplane ("" as without --dataplane), and
// returns its job service's address.
func runProbingController(t *testing.T, ctx context.Context, sw *softswitch.Switch, dataplane string, election uint64) string {
	t.Helper()
	target, err := controller.TargetFor(controller.KindSoftswitch, 256)
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	ready, done := make(chan net.Addr, 1), make(chan error, 1)
	go func() {
		done <- controller.Run(runCtx, controller.Config{
			Target: sw.P4RuntimeAddr(), ElectionID: election, Dataplane: dataplane, ProbeDataplane: true, Listen: "127.0.0.1:0", Slots: 512, Switch: target,
			Logger: slog.New(slog.DiscardHandler), Ready: func(a net.Addr) { ready <- a },
		})
	}()
	select {
	case a := <-ready:
		t.Cleanup(func() {
			stop()
			if err := <-done; err != nil {
				t.Errorf("controller: %v", err)
			}
		})
		return a.String()
	case err := <-done:
		stop()
		t.Fatalf("controller ended before serving: %v", err)
	}
	return ""
}

// joinAndReduce runs n ranks of a job through one int32 allreduce each and
// returns every rank's error (nil where the sums were right).
func joinAndReduce(ctx context.Context, jobs string, n int) []error {
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		wg.Go(func() {
			sess, err := switchml.Join(ctx, switchml.Config{Controller: jobs, Job: "probed", Rank: r, Workers: n, Bind: "127.0.0.1",
				Lanes: 2, Window: 8, PacketElements: 64, Extended: true, JoinTimeout: 30 * time.Second})
			if err != nil {
				errs[r] = err
				return
			}
			defer sess.Close()
			x := make([]int32, 1000)
			for i := range x {
				x[i] = int32(i * (r + 1))
			}
			if err := sess.AllReduceInt32(ctx, x); err != nil {
				errs[r] = err
				return
			}
			for i := range x {
				if want := int32(i * n * (n + 1) / 2); x[i] != want {
					errs[r] = fmt.Errorf("sum[%d] = %d, want %d", i, x[i], want)
					return
				}
			}
		})
	}
	wg.Wait()
	return errs
}

// A controller started without the switch's --dataplane probes the
// address it would hand out (the P4Runtime host, port 48864), gets no
// answer, and refuses every rank's registration with an error that names
// that address and --dataplane, so that no rank waits for results that
// cannot come. Given the switch's address, it finds the switch there and
// the job's sums are right.
func TestControllerProbesDataplane(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	sw := probedSwitch(t, ctx)
	if ap := netip.MustParseAddrPort(sw.DataplaneAddr()); ap.Port() == 48864 {
		t.Skip("the free port the switch got is the default one")
	}

	t.Run("without --dataplane", func(t *testing.T) {
		jobs := runProbingController(t, ctx, sw, "", 1)
		for r, err := range joinAndReduce(ctx, jobs, 3) {
			if err == nil {
				t.Errorf("rank %d: no error, with no switch at 127.0.0.9:48864", r)
				continue
			}
			for _, want := range []string{"127.0.0.9:48864", "Dataplane"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("rank %d: %v; want it to name %s", r, err, want)
				}
			}
		}
	})
	t.Run("with the switch's --dataplane", func(t *testing.T) {
		// A higher election id than the first controller's: the switch
		// may not yet have seen that controller's stream end.
		jobs := runProbingController(t, ctx, sw, sw.DataplaneAddr(), 2)
		for r, err := range joinAndReduce(ctx, jobs, 3) {
			if err != nil {
				t.Errorf("rank %d: %v", r, err)
			}
		}
	})
}

// The probe is answered only where a software switch listens: a UDP
// socket that reads and never answers is reported silent.
func TestProbeDataplanesNamesSilentAddress(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sw := probedSwitch(t, ctx)
	silent, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	answering := netip.MustParseAddrPort(sw.DataplaneAddr())
	mute := silent.LocalAddr().(*net.UDPAddr).AddrPort()
	if err := controller.ProbeDataplanes(ctx, []netip.AddrPort{answering}); err != nil {
		t.Errorf("the switch at %v: %v", answering, err)
	}
	pctx, pcancel := context.WithTimeout(ctx, controller.DataplaneProbeTimeout)
	defer pcancel()
	err = controller.ProbeDataplanes(pctx, []netip.AddrPort{answering, mute})
	if err == nil || !strings.Contains(err.Error(), mute.String()) || strings.Contains(err.Error(), answering.String()) {
		t.Errorf("probing %v and a silent %v: %v; want an error naming only the silent one", answering, mute, err)
	}
}
