package switchml

import (
	"crypto/tls"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/switchml/switchml-go/switchml/transport"
	"github.com/switchml/switchml-go/switchml/wire"
)

// Defaults of Config, chosen to work on one machine.
const (
	DefaultController     = "127.0.0.1:50051"
	DefaultLanes          = 4
	DefaultWindow         = 64  // packets in flight per lane: 256 per worker, the reference default
	DefaultPacketElements = 256 // 1 KiB payloads: a quarter of the per-packet cost of 64; a Tofino needs recirculation above 64
	DefaultTimeout        = 10 * time.Millisecond
	DefaultJoinTimeout    = 60 * time.Second
	DefaultGiveUp         = 30 * time.Second
)

// Config describes one worker of a job.
type Config struct {
	// Controller is the controller's gRPC address (host:port).
	Controller string
	// Job names the job; every rank of it uses the same name.
	Job string
	// Rank of this worker, 0 <= Rank < Workers.
	Rank int
	// Workers is the world size.
	Workers int
	// Bind is the local IP address lane sockets bind to and report to the
	// controller. Empty means the address this host uses to reach the
	// controller, which is what the switch sees when both sit behind the
	// same network.
	Bind string
	// Lanes is the number of parallel lanes (sockets), each with its own
	// window of slots.
	Lanes int
	// Window is the number of packets in flight per lane.
	Window int
	// PacketElements is the number of 32-bit values per packet. 0 picks
	// what the switch takes, as the controller describes it:
	// DefaultPacketElements where the switch takes it (the software
	// switch), else the largest size it takes (64 on the P4 programs).
	// The compatible header carries 32, 64, 128 and 256; larger values (up
	// to 2048) need Extended and the software switch.
	PacketElements int
	// Extended selects the software switch's extended header (wider job
	// ids, more workers, more elements per packet).
	Extended bool
	// Timeout is the retransmission timeout of a packet.
	Timeout time.Duration
	// GiveUp fails an allreduce with ErrTimeoutBudget when a packet has
	// gone unanswered for this long, retransmissions included.
	GiveUp time.Duration
	// JoinTimeout bounds Join when the context has no deadline.
	JoinTimeout time.Duration
	// Token is the job owner's secret: every rank of a job uses the same,
	// and while the job exists the controller refuses registrations under
	// its name with another token, so that other clients cannot join,
	// restart or take over the job. Empty is the shared default.
	Token string
	// TLS, if set, secures the link to the controller (see switchml/secure;
	// with a client certificate for a controller that requires one).
	TLS *tls.Config
	// Faults injects loss, duplication and reordering into what this
	// worker sends (testing and demonstration).
	Faults transport.Faults
}

// MaxCompatWorkers is the largest job the compatible format (a 32-bit
// bitmap per slot) can serve.
const MaxCompatWorkers = 32

// NeedsExtended reports whether a job of workers ranks with packets of
// packetElements values (0: the default) needs the extended header.
func NeedsExtended(workers, packetElements int) bool {
	if packetElements == 0 {
		packetElements = DefaultPacketElements
	}
	_, ok := wire.CompatSizeCode(packetElements)
	return !ok || workers > MaxCompatWorkers
}

// choosePacketElements picks a packet size among those a switch takes with
// the compatible header (see Config.PacketElements).
func choosePacketElements(takes []uint32, extendedMax uint32, extended bool) int {
	if extended {
		return min(DefaultPacketElements, int(extendedMax))
	}
	best := 0
	for _, k := range takes {
		if int(k) == DefaultPacketElements {
			return DefaultPacketElements
		}
		if int(k) < DefaultPacketElements && int(k) > best {
			best = int(k)
		}
	}
	if best == 0 && len(takes) > 0 {
		best = int(slices.Min(takes))
	}
	return best
}

func (c Config) withDefaults() Config {
	if c.Controller == "" {
		c.Controller = DefaultController
	}
	if c.Lanes == 0 {
		c.Lanes = DefaultLanes
	}
	if c.Window == 0 {
		c.Window = DefaultWindow
	}
	if c.Timeout == 0 {
		c.Timeout = DefaultTimeout
	}
	if c.JoinTimeout == 0 {
		c.JoinTimeout = DefaultJoinTimeout
	}
	if c.GiveUp == 0 {
		c.GiveUp = DefaultGiveUp
	}
	return c
}

func (c Config) validate() error {
	var errs []error
	if c.Job == "" {
		errs = append(errs, errors.New("Job is empty: name the job (every rank uses the same name)"))
	}
	if c.Workers < 1 {
		errs = append(errs, fmt.Errorf("Workers = %d: the world size must be at least 1", c.Workers))
	}
	if c.Rank < 0 || c.Rank >= c.Workers {
		errs = append(errs, fmt.Errorf("Rank = %d: want 0 <= rank < Workers (%d)", c.Rank, c.Workers))
	}
	if c.Lanes < 1 || c.Lanes > 64 {
		errs = append(errs, fmt.Errorf("Lanes = %d: want 1..64", c.Lanes))
	}
	if c.Window < 1 || c.Window > 4096 {
		errs = append(errs, fmt.Errorf("Window = %d: want 1..4096 packets per lane", c.Window))
	}
	switch {
	case c.PacketElements == 0: // chosen at Join from what the switch takes
	case c.PacketElements < 0:
		errs = append(errs, fmt.Errorf("PacketElements = %d: want 0 (what the switch takes) or a packet size", c.PacketElements))
	case c.Extended:
		if c.PacketElements > wire.MaxElements {
			errs = append(errs, fmt.Errorf("PacketElements = %d: the extended header carries 1..%d", c.PacketElements, wire.MaxElements))
		}
	default:
		if _, ok := wire.CompatSizeCode(c.PacketElements); !ok {
			errs = append(errs, fmt.Errorf("PacketElements = %d: the compatible header carries 32, 64, 128 or 256; set Extended for other sizes", c.PacketElements))
		}
	}
	if !c.Extended && c.Workers > MaxCompatWorkers {
		errs = append(errs, fmt.Errorf("Workers = %d: the compatible format allows %d; set Extended for more", c.Workers, MaxCompatWorkers))
	}
	if c.Timeout < 0 || c.GiveUp < 0 || c.JoinTimeout < 0 {
		errs = append(errs, errors.New("Timeout, GiveUp and JoinTimeout must not be negative"))
	}
	if err := c.Faults.Validate(); err != nil {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		return fmt.Errorf("switchml: bad config: %w", errors.Join(errs...))
	}
	return nil
}
