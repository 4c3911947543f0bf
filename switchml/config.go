package switchml

import (
	"errors"
	"fmt"
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
	// PacketElements is the number of 32-bit values per packet. 32, 64,
	// 128 and 256 work with a P4 switch; larger values (up to 2048) need
	// Extended and the software switch.
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
	if c.PacketElements == 0 {
		c.PacketElements = DefaultPacketElements
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
	if c.Extended {
		if c.PacketElements < 1 || c.PacketElements > wire.MaxElements {
			errs = append(errs, fmt.Errorf("PacketElements = %d: the extended header carries 1..%d", c.PacketElements, wire.MaxElements))
		}
	} else {
		if _, ok := wire.CompatSizeCode(c.PacketElements); !ok {
			errs = append(errs, fmt.Errorf("PacketElements = %d: the compatible header carries 32, 64, 128 or 256; set Extended for other sizes", c.PacketElements))
		}
		if c.Workers > MaxCompatWorkers {
			errs = append(errs, fmt.Errorf("Workers = %d: the compatible format allows %d; set Extended for more", c.Workers, MaxCompatWorkers))
		}
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
