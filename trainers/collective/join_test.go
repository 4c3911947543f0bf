package collective

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/switchml/switchml-go/p4/local"
	"github.com/switchml/switchml-go/trainers/internal/freeport"
)

func TestCheckAgreement(t *testing.T) {
	base := []Setting{{"--model", "cnn"}, {"--seed", "1"}, {"training data", "3000 examples sha256:ab12"}}
	with := func(name, value string) []Setting {
		out := append([]Setting(nil), base...)
		for i := range out {
			if out[i].Name == name {
				out[i].Value = value
			}
		}
		return out
	}
	if err := CheckAgreement([][]Setting{base, base, base}); err != nil {
		t.Fatalf("equal settings: %v", err)
	}
	for _, tc := range []struct {
		name string
		all  [][]Setting
		want []string
	}{
		{"seed", [][]Setting{base, base, with("--seed", "7")}, []string{"rank 2 has --seed 7, rank 0 has --seed 1"}},
		{"two ranks, two settings", [][]Setting{base, with("--model", "mlp"), with("training data", "60000 examples sha256:ff00")},
			[]string{"rank 1 has --model mlp, rank 0 has --model cnn", "rank 2 has training data 60000 examples sha256:ff00, rank 0 has training data 3000 examples sha256:ab12"}},
		{"missing", [][]Setting{base, base[:2]}, []string{"rank 1 does not report training data"}},
		{"extra", [][]Setting{base[:2], base}, []string{"rank 1 reports training data 3000 examples sha256:ab12, which rank 0 does not"}},
	} {
		err := CheckAgreement(tc.all)
		if !errors.Is(err, ErrDisagree) {
			t.Errorf("%s: error %v, want ErrDisagree", tc.name, err)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: error %q does not say %q", tc.name, err, w)
			}
		}
	}
}

// eachRank runs f for ranks 0..n-1 at once and returns their errors.
func eachRank(n int, f func(rank int) error) []error {
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[r] = f(r)
		}()
	}
	wg.Wait()
	return errs
}

func TestPeerRendezvousAllGather(t *testing.T) {
	const n = 3
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	// A stray client that never says hello must not hold the ranks up.
	stray, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer stray.Close()
	got := make([][][]byte, n)
	errs := eachRank(n, func(r int) error {
		var l net.Listener
		if r == 0 {
			l = ln
		}
		p, err := JoinPeers(ctx, r, n, ln.Addr().String(), l)
		if err != nil {
			return err
		}
		defer p.Close()
		// Two rounds: the second must not return the first's messages.
		for round := range 2 {
			all, err := p.AllGather(ctx, []byte(fmt.Sprintf("rank %d round %d", r, round)))
			if err != nil {
				return err
			}
			got[r] = all
		}
		return nil
	})
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	for r := range n {
		for from := range n {
			if want := fmt.Sprintf("rank %d round 1", from); string(got[r][from]) != want {
				t.Errorf("rank %d got %q from rank %d, want %q", r, got[r][from], from, want)
			}
		}
	}
	// Rank 0's listener is still usable after the rendezvous.
	go func() {
		if c, err := net.Dial("tcp", ln.Addr().String()); err == nil {
			c.Close()
		}
	}()
	if c, err := ln.Accept(); err != nil {
		t.Fatalf("rank 0's listener after the rendezvous: %v", err)
	} else {
		c.Close()
	}
}

func TestPeerRendezvousRefusesOtherWorldSize(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	errs := eachRank(2, func(r int) error {
		var l net.Listener
		workers := 2
		if r == 0 {
			l = ln
		} else {
			workers = 3
		}
		p, err := JoinPeers(ctx, r, workers, ln.Addr().String(), l)
		if err == nil {
			p.Close()
		}
		return err
	})
	for r, err := range errs {
		if !errors.Is(err, ErrDisagree) || !strings.Contains(err.Error(), "rank 1 says the job has 3 workers, rank 0 says 2") {
			t.Errorf("rank %d: error %v, want the two world sizes named", r, err)
		}
	}
}

// A rank whose rank 0 never comes up fails when its context ends, naming
// the address it tried; rank 0 names the rank that did not come.
func TestPeerRendezvousNamesWhoIsMissing(t *testing.T) {
	addr := freeport.Loopback(t, 1)[0]
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	_, err := JoinPeers(ctx, 1, 2, addr, nil)
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "could not reach rank 0 at "+addr) {
		t.Errorf("rank 1 without rank 0: %v", err)
	}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	ctx2, cancel2 := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel2()
	_, err = JoinPeers(ctx2, 0, 3, ln.Addr().String(), ln)
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "ranks 1, 2 did not join") {
		t.Errorf("rank 0 alone: %v", err)
	}
}

// allReduceAll joins n ranks with cfg(rank) and checks one allreduce sums.
func allReduceAll(t *testing.T, n int, cfg func(rank int) JoinConfig) {
	t.Helper()
	out := runWorkers(t, n, func(ctx context.Context, r int) (Backend, error) {
		return Join(ctx, cfg(r))
	}, 1000)
	checkSums(t, n, out)
}

func settings(seed string) []Setting {
	return []Setting{{"--model", "cnn"}, {"--seed", seed}}
}

func TestJoinAcrossPeers(t *testing.T) {
	const n = 3
	for _, kind := range []Kind{Ring, Exact} {
		peers := freeport.Loopback(t, n)
		allReduceAll(t, n, func(r int) JoinConfig {
			return JoinConfig{Config: Config{Kind: kind, Rank: r, Workers: n}, Peers: peers, Settings: settings("1")}
		})
	}
	// exact needs only rank 0's address.
	peers := freeport.Loopback(t, 1)
	allReduceAll(t, n, func(r int) JoinConfig {
		return JoinConfig{Config: Config{Kind: Exact, Rank: r, Workers: n}, Peers: peers, Settings: settings("1")}
	})
}

func TestJoinAtController(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	fab := local.ForTest(t, local.Options{})
	const n = 3
	for _, kind := range []Kind{Ring, Exact, SwitchML} {
		allReduceAll(t, n, func(r int) JoinConfig {
			return JoinConfig{Config: Config{Kind: kind, Rank: r, Workers: n, Controller: fab.ControllerAddr(), Job: "join-" + string(kind)},
				Settings: settings("1")}
		})
	}
	// Ranks that disagree are refused over the controller too.
	checkEveryRankRefused(t, joinEach(ctx, 2, func(r int) JoinConfig {
		return JoinConfig{Config: Config{Kind: SwitchML, Rank: r, Workers: 2, Controller: fab.ControllerAddr(), Job: "join-disagree"},
			Settings: settings(fmt.Sprint(r + 1))}
	}), "rank 1 has --seed 2, rank 0 has --seed 1")
}

// joinEach joins n ranks with cfg(rank) at once, closes the backends that
// came up and returns the ranks' errors.
func joinEach(ctx context.Context, n int, cfg func(rank int) JoinConfig) []error {
	return eachRank(n, func(r int) error {
		be, err := Join(ctx, cfg(r))
		if err == nil {
			be.Close()
		}
		return err
	})
}

// checkEveryRankRefused checks that every rank failed with ErrDisagree
// saying want.
func checkEveryRankRefused(t *testing.T, errs []error, want string) {
	t.Helper()
	for r, err := range errs {
		if !errors.Is(err, ErrDisagree) || !strings.Contains(err.Error(), want) {
			t.Errorf("rank %d: error %v, want ErrDisagree saying %q", r, err, want)
		}
	}
}

// Every rank of a job whose ranks disagree fails before the backend
// starts, and says on what.
func TestJoinRefusesDisagreement(t *testing.T) {
	const n = 3
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	peers := freeport.Loopback(t, n)
	checkEveryRankRefused(t, joinEach(ctx, n, func(r int) JoinConfig {
		seed := "1"
		if r == 2 {
			seed = "7"
		}
		return JoinConfig{Config: Config{Kind: Ring, Rank: r, Workers: n}, Peers: peers, Settings: settings(seed)}
	}), "rank 2 has --seed 7, rank 0 has --seed 1")
}

func TestJoinControllerUnreachable(t *testing.T) {
	addr := freeport.Loopback(t, 1)[0]
	for _, kind := range []Kind{SwitchML, Ring} {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err := Join(ctx, JoinConfig{Config: Config{Kind: kind, Rank: 0, Workers: 2, Controller: addr, Job: "nobody"}})
		cancel()
		if err == nil || !strings.Contains(err.Error(), addr) {
			t.Errorf("%s: error %v, want one naming the controller %s", kind, err, addr)
		}
	}
}
