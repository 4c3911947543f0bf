package main

// One rank of a job whose ranks run on several hosts (--rank), as torchrun
// or horovodrun start them: every host runs the same command with its own
// --rank, and the ranks meet before training:
//
//   - switchml joins the job at --controller (a running `switchml
//     controller`), which also relays the ranks' settings;
//   - ring and exact meet at --peers (rank 0 gathers at the first address
//     over TCP, and the backend then uses the same addresses), or at
//     --controller, whose job service relays each rank's listen address
//     without the switch's data plane.
//
// Before any training step the ranks exchange their settings (model, data
// fingerprints, seed, batch, epochs, optimizer, world size, the checkpoint
// they resume from, ...) and all of them stop with an error naming each
// difference if they disagree. Each rank keeps its own checkpoint file, as
// each host has its own disk.

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"strconv"
	"strings"

	"github.com/switchml/switchml-go/switchml"
	"github.com/switchml/switchml-go/trainers/collective"
	"github.com/switchml/switchml-go/trainers/data"
	"github.com/switchml/switchml-go/trainers/models"
	"github.com/switchml/switchml-go/trainers/train"
)

// defaultRankJob is the job name of ranks started without --job: it must
// come out the same on every host, so it depends on nothing local.
const defaultRankJob = "train"

// checkRankFlags refuses flag combinations the one-rank mode cannot run,
// before anything starts.
func checkRankFlags(f *flags, kind collective.Kind) error {
	if f.rank < 0 {
		switch {
		case f.peers != "":
			return errors.New("--peers needs --rank: it lists the ranks of a job run across hosts")
		case f.listen != "":
			return errors.New("--listen needs --rank and --controller")
		}
		return nil
	}
	if f.rank >= f.workers {
		return fmt.Errorf("--rank %d: want 0..%d (--workers %d)", f.rank, f.workers-1, f.workers)
	}
	if f.joinTimeout <= 0 {
		return fmt.Errorf("--join-timeout %v: want a positive duration such as 2m", f.joinTimeout)
	}
	peers := f.peerList()
	switch {
	case kind == collective.SwitchML && f.controller == "":
		return errors.New("--backend switchml with --rank needs --controller host:port (a running switchml controller)")
	case kind == collective.SwitchML && (f.peers != "" || f.listen != ""):
		return errors.New("--peers and --listen: not for switchml, whose ranks meet at --controller")
	case f.peers != "" && f.controller != "":
		return errors.New("give either --peers or --controller for the ranks to meet at, not both")
	case kind != collective.SwitchML && f.peers == "" && f.controller == "":
		return fmt.Errorf("--backend %s with --rank needs --peers host:port,... (every rank's, in order) or --controller host:port", kind)
	case f.listen != "" && f.controller == "":
		return errors.New("--listen is for ranks that meet at --controller: with --peers each rank listens on its entry")
	case kind == collective.Ring && f.peers != "" && len(peers) != f.workers:
		return fmt.Errorf("--peers has %d addresses, --workers is %d: the ring needs one per rank, in rank order", len(peers), f.workers)
	case kind == collective.Exact && f.peers != "" && len(peers) != 1 && len(peers) != f.workers:
		return fmt.Errorf("--peers has %d addresses, --workers is %d: exact needs rank 0's address, or one per rank", len(peers), f.workers)
	}
	for i, p := range peers {
		if _, port, err := net.SplitHostPort(p); err != nil || port == "0" || port == "" {
			return fmt.Errorf("--peers entry %d %q: want host:port with a port other than 0", i, p)
		}
	}
	return nil
}

// peerList is --peers split at the commas; nil when empty.
func (f *flags) peerList() []string {
	if f.peers == "" {
		return nil
	}
	out := strings.Split(f.peers, ",")
	for i := range out {
		out[i] = strings.TrimSpace(out[i])
	}
	return out
}

// runRank runs this process's rank of a job across hosts.
func runRank(ctx context.Context, f *flags) error {
	// Everything local is checked before meeting the others, so a missing
	// data set or a bad checkpoint is this host's error, said here.
	var tr, te *data.Set
	if models.LookupBench(f.model) == nil {
		var err error
		if tr, te, err = loadData(f); err != nil {
			return fmt.Errorf("rank %d: %w", f.rank, err)
		}
	}
	ck, err := rankCheckpoint(f)
	if err != nil {
		return fmt.Errorf("rank %d: %w", f.rank, err)
	}
	kind, _ := collective.ParseKind(f.backend)
	trace, closeTrace, err := rankTrace(f.trace, f.rank)
	if err != nil {
		return err
	}
	defer closeTrace()
	jctx, cancel := context.WithTimeout(ctx, f.joinTimeout)
	be, err := collective.Join(jctx, collective.JoinConfig{
		Config: collective.Config{Kind: kind, Rank: f.rank, Workers: f.workers,
			Controller: f.controller, Job: cmp.Or(f.job, defaultRankJob), Token: f.token, PacketElements: f.packetElements, WireBits: f.wireBits, Trace: trace},
		Peers: f.peerList(), Listen: f.listen, Settings: jobSettings(f, tr, te, ck),
	})
	expired := jctx.Err() != nil && ctx.Err() == nil
	cancel()
	switch {
	case err != nil && expired:
		return fmt.Errorf("rank %d: the job did not come together within --join-timeout %v: %w", f.rank, f.joinTimeout, switchml.InFlags(err, switchmlFlags))
	case err != nil:
		return fmt.Errorf("rank %d: %w", f.rank, switchml.InFlags(err, switchmlFlags))
	}
	defer be.Close()
	if !f.quiet {
		fmt.Fprintf(os.Stderr, "rank %d of %d: joined over %s; the ranks agree on the job\n", f.rank, f.workers, f.backend)
	}
	o := workerOptions(f, f.rank, 1)
	o.Train, o.Test = tr, te
	o.PerRankCheckpoint, o.Resume = true, ck
	// Every host keeps its own output, so every rank reports.
	return trainWorker(ctx, f, o, be, true)
}

// rankCheckpoint is the checkpoint this rank resumes from: nil without
// --resume (an old one is removed, as the launcher removes the directory)
// or when there is none.
func rankCheckpoint(f *flags) (*train.Checkpoint, error) {
	if f.checkpointDir == "" {
		return nil, nil
	}
	// Only this rank's own file goes: ranks on one host may share the
	// directory.
	path := train.RankCheckpointFile(f.checkpointDir, f.rank)
	if !f.resume {
		if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("removing the old checkpoint: %w", err)
		}
		return nil, nil
	}
	ck, err := train.LoadCheckpointFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	return ck, err
}

// jobSettings is what every rank must share, named by the flags that set
// it, so that a disagreement says which flag to change. The data are
// compared by content: hosts may keep them in different directories.
func jobSettings(f *flags, tr, te *data.Set, ck *train.Checkpoint) []collective.Setting {
	s := []collective.Setting{
		{Name: "--workers", Value: strconv.Itoa(f.workers)},
		{Name: "--backend", Value: f.backend},
		{Name: "--model", Value: f.model},
		{Name: "--seed", Value: strconv.FormatInt(f.seed, 10)},
		{Name: "--batch", Value: strconv.Itoa(f.batch)},
		{Name: "--optimizer", Value: f.optimizer},
		{Name: "--lr", Value: strconv.FormatFloat(f.lr, 'g', -1, 64)},
		{Name: "--bucket-elems", Value: strconv.Itoa(f.bucketElems)},
	}
	if f.peers != "" {
		s = append(s, collective.Setting{Name: "--peers", Value: strings.Join(f.peerList(), ",")})
	}
	if f.backend == string(collective.SwitchML) {
		s = append(s, collective.Setting{Name: "--packet-elements", Value: strconv.Itoa(f.packetElements)},
			collective.Setting{Name: "--wire-bits", Value: strconv.Itoa(f.wireBits)})
	}
	if models.LookupBench(f.model) != nil {
		return append(s,
			collective.Setting{Name: "--steps", Value: strconv.Itoa(f.steps)},
			collective.Setting{Name: "--warmup-steps", Value: strconv.Itoa(f.warmupSteps)})
	}
	resume := "none"
	if ck != nil {
		resume = fmt.Sprintf("after epoch %d (step %d, weights %s)", ck.Epoch+1, ck.Step, ck.Fingerprint())
	}
	return append(s,
		collective.Setting{Name: "--epochs", Value: strconv.Itoa(f.epochs)},
		collective.Setting{Name: "--eval-every", Value: strconv.Itoa(f.evalEvery)},
		collective.Setting{Name: "--dataset", Value: f.dataset},
		collective.Setting{Name: "--train-limit", Value: strconv.Itoa(f.trainLimit)},
		collective.Setting{Name: "--test-limit", Value: strconv.Itoa(f.testLimit)},
		collective.Setting{Name: "training data", Value: describeSet(tr)},
		collective.Setting{Name: "test data", Value: describeSet(te)},
		collective.Setting{Name: "--resume checkpoint", Value: resume},
	)
}

func describeSet(s *data.Set) string {
	return fmt.Sprintf("%d examples sha256:%s", s.Len(), s.Fingerprint())
}
