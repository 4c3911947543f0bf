// Package rack builds an emulated rack on one Linux host: one network
// namespace per worker and one for the switch, each worker joined by a veth
// pair to a Linux bridge in the switch's namespace, and every port shaped with
// a token bucket filter (tc qdisc tbf) to the same rate in both directions.
//
// The worker end of a veth pair shapes what the worker uploads; the bridge
// port end shapes what it downloads. A process in the switch namespace that
// listens on the bridge's address (SwitchIP) sits where a switch's CPU port or
// an aggregation engine would, and traffic between two workers crosses the
// bridge through both of their shaped ports, as it would cross a ToR switch.
//
// With Config.Leaves the rack is a two-level tree: each leaf has a
// namespace with a bridge of its own, its workers' ports join that bridge,
// and a shaped trunk joins it to the switch namespace's bridge (the spine).
// All addresses stay in one subnet: a worker reaches SwitchIP through its
// leaf and the trunk, and a process in leaf k's namespace listening on
// LeafIP(k) sits where a leaf switch's aggregation engine would.
//
// Everything is named from Config.Prefix, so a rack can be torn down by name:
// Close removes what New built, and New (or Cleanup) first removes the leftovers
// of an earlier run with the same prefix that could not clean up after itself.
//
// Building a rack needs root (CAP_NET_ADMIN and CAP_SYS_ADMIN) and iproute2's
// ip and tc commands.
package rack

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Defaults of Config.
const (
	DefaultPrefix = "smlr"
	DefaultSubnet = "10.213.0.0/24"
	DefaultMTU    = 1500
	// MaxWorkers keeps worker addresses inside a /24 and interface names short.
	MaxWorkers = 200
)

// Config describes a rack.
type Config struct {
	// Workers is the number of worker namespaces (1..MaxWorkers).
	Workers int
	// RateMbit is the rate of every port in each direction, in Mbit/s (10^6
	// bit/s) of Ethernet frames as the kernel counts them (headers included,
	// no preamble or FCS). Zero leaves the ports unshaped.
	RateMbit float64
	// MTU of every port and the bridge; zero means DefaultMTU.
	MTU int
	// Prefix names everything the rack creates (namespaces <prefix>s and
	// <prefix>w<i>); at most 8 characters of [a-z0-9]. Zero means DefaultPrefix.
	// Two racks alive at once need different prefixes and subnets.
	Prefix string
	// Subnet is an IPv4 /24 (or larger) prefix: the bridge gets .1, worker i
	// gets .(10+i). Zero means DefaultSubnet.
	Subnet string
	// BurstBytes and LimitBytes override the tbf bucket size and queue length
	// that Shaping derives from the rate; zero means derived.
	BurstBytes, LimitBytes int
	// Leaves, when 2 or more, builds a two-level tree: worker i sits under
	// leaf i mod Leaves (so the first n workers of any job spread evenly),
	// each leaf (namespace <prefix>l<k>, address LeafIP(k)) joined to the
	// spine's bridge by a trunk. Zero or one: the flat rack.
	Leaves int
	// TrunkRatio sets each trunk's rate to TrunkRatio times the port rate,
	// both ways; zero means the leaf's most workers, a non-blocking tree
	// (a trunk carries what all of its leaf's ports can).
	TrunkRatio float64
}

// MaxLeaves bounds Config.Leaves: leaf addresses sit between the bridge's
// and the workers'.
const MaxLeaves = 8

// Shaping returns the tbf bucket (burst) and queue limit, in bytes, for a rate.
//
// The bucket must hold what arrives between two runs of the qdisc watchdog
// (timer slack and softirq latency of a loaded 2-core machine), or the link
// delivers less than its rate. 1 ms of traffic, and never less than 16 full
// frames, measured to deliver 99% of the rate for UDP at 100..1000 Mbit/s.
// The queue holds 20 ms of traffic (about what a shallow-buffered ToR port
// holds per port at these rates), at least 64 frames: deep enough for a
// window of a few hundred packets, shallow enough that TCP sees losses
// instead of seconds of queueing.
func Shaping(rateMbit float64, mtu int) (burst, limit int) {
	if mtu <= 0 {
		mtu = DefaultMTU
	}
	frame := mtu + 14
	bytesPerMs := rateMbit * 1e6 / 8 / 1000
	burst = max(int(bytesPerMs), 16*frame)
	limit = max(int(20*bytesPerMs), 64*frame) + burst
	return burst, limit
}

// Port is one shaped interface: Dev in namespace NS shapes traffic leaving
// it, which is Worker's upload (Up) or download (!Up). A trunk of a tree has
// Worker -1-k for leaf k; Up is then towards the spine.
type Port struct {
	NS, Dev string
	Worker  int
	Up      bool
}

// Trunk reports whether p joins a leaf to the spine.
func (p Port) Trunk() bool { return p.Worker < 0 }

// Rack is a built rack. Its methods are safe for concurrent use.
type Rack struct {
	cfg        Config
	base       netip.Addr
	switchNS   string
	workerNS   []string
	leafNS     []string
	ports      []Port
	mu         sync.Mutex
	rate       float64
	closed     bool
	closeError error
}

var prefixRE = regexp.MustCompile(`^[a-z][a-z0-9]{0,7}$`)

func (c *Config) fill() (netip.Addr, error) {
	if c.Prefix == "" {
		c.Prefix = DefaultPrefix
	}
	if !prefixRE.MatchString(c.Prefix) {
		return netip.Addr{}, fmt.Errorf("rack: Prefix %q: want 1..8 characters of [a-z0-9], starting with a letter", c.Prefix)
	}
	if c.Workers < 1 || c.Workers > MaxWorkers {
		return netip.Addr{}, fmt.Errorf("rack: Workers = %d, want 1..%d", c.Workers, MaxWorkers)
	}
	if c.RateMbit < 0 {
		return netip.Addr{}, fmt.Errorf("rack: RateMbit = %v must not be negative", c.RateMbit)
	}
	if c.MTU == 0 {
		c.MTU = DefaultMTU
	}
	if c.MTU < 576 || c.MTU > 65535 {
		return netip.Addr{}, fmt.Errorf("rack: MTU = %d, want 576..65535", c.MTU)
	}
	if c.Subnet == "" {
		c.Subnet = DefaultSubnet
	}
	p, err := netip.ParsePrefix(c.Subnet)
	if err != nil || !p.Addr().Is4() || p.Bits() > 24 {
		return netip.Addr{}, fmt.Errorf("rack: Subnet %q: want an IPv4 prefix of /24 or larger, like %s", c.Subnet, DefaultSubnet)
	}
	if c.BurstBytes < 0 || c.LimitBytes < 0 {
		return netip.Addr{}, fmt.Errorf("rack: BurstBytes and LimitBytes must not be negative")
	}
	if c.Leaves < 0 || c.Leaves > MaxLeaves || c.Leaves > c.Workers {
		return netip.Addr{}, fmt.Errorf("rack: Leaves = %d, want 0..%d and at most one per worker (%d workers)", c.Leaves, MaxLeaves, c.Workers)
	}
	if c.Leaves == 1 {
		c.Leaves = 0
	}
	if c.TrunkRatio < 0 {
		return netip.Addr{}, fmt.Errorf("rack: TrunkRatio = %v must not be negative", c.TrunkRatio)
	}
	if c.Leaves > 1 && c.TrunkRatio == 0 {
		c.TrunkRatio = float64((c.Workers + c.Leaves - 1) / c.Leaves)
	}
	return p.Masked().Addr(), nil
}

// New builds a rack. It first removes leftovers of an earlier rack with the
// same prefix. On failure, or when ctx ends midway, it removes what it built.
func New(ctx context.Context, cfg Config) (*Rack, error) {
	base, err := cfg.fill()
	if err != nil {
		return nil, err
	}
	for _, tool := range []string{"ip", "tc"} {
		if _, err := exec.LookPath(tool); err != nil {
			return nil, fmt.Errorf("rack: needs iproute2's %s command (apt-get install iproute2): %w", tool, err)
		}
	}
	if os.Geteuid() != 0 {
		return nil, errors.New("rack: needs root to create network namespaces")
	}
	if err := Cleanup(cfg.Prefix); err != nil {
		return nil, err
	}
	r := &Rack{cfg: cfg, base: base, switchNS: cfg.Prefix + "s"}
	for i := range cfg.Workers {
		r.workerNS = append(r.workerNS, fmt.Sprintf("%sw%d", cfg.Prefix, i))
	}
	for k := range cfg.Leaves {
		r.leafNS = append(r.leafNS, fmt.Sprintf("%sl%d", cfg.Prefix, k))
	}
	if err := r.build(ctx); err != nil {
		r.Close()
		return nil, err
	}
	return r, nil
}

func (r *Rack) build(ctx context.Context) error {
	sw := r.switchNS
	mtu := strconv.Itoa(r.cfg.MTU)
	steps := [][]string{
		{"ip", "netns", "add", sw},
		{"ip", "-n", sw, "link", "set", "lo", "up"},
		{"ip", "-n", sw, "link", "add", "br0", "mtu", mtu, "type", "bridge", "stp_state", "0", "forward_delay", "0"},
		{"ip", "-n", sw, "addr", "add", r.SwitchIP() + "/24", "dev", "br0"},
	}
	for k, ns := range r.leafNS {
		tmp := fmt.Sprintf("%st%d", r.cfg.Prefix, k)
		up := fmt.Sprintf("u%d", k)
		steps = append(steps,
			[]string{"ip", "netns", "add", ns},
			[]string{"ip", "-n", ns, "link", "set", "lo", "up"},
			[]string{"ip", "-n", ns, "link", "add", "br0", "mtu", mtu, "type", "bridge", "stp_state", "0", "forward_delay", "0"},
			[]string{"ip", "-n", ns, "addr", "add", r.LeafIP(k) + "/24", "dev", "br0"},
			[]string{"ip", "link", "add", tmp, "mtu", mtu, "netns", ns, "type", "veth", "peer", "name", up, "mtu", mtu, "netns", sw},
			[]string{"ip", "-n", ns, "link", "set", tmp, "name", "trunk"},
			[]string{"ip", "-n", ns, "link", "set", "trunk", "master", "br0"},
			[]string{"ip", "-n", ns, "link", "set", "trunk", "up"},
			[]string{"ip", "-n", sw, "link", "set", up, "master", "br0"},
			[]string{"ip", "-n", sw, "link", "set", up, "up"},
			[]string{"ip", "-n", ns, "link", "set", "br0", "up"},
		)
		// Leaf k's trunk: upward from the leaf, downward from the spine.
		r.ports = append(r.ports, Port{NS: ns, Dev: "trunk", Worker: -1 - k, Up: true}, Port{NS: sw, Dev: up, Worker: -1 - k})
	}
	for i, ns := range r.workerNS {
		tmp := fmt.Sprintf("%sv%d", r.cfg.Prefix, i)
		port := fmt.Sprintf("p%d", i)
		bridgeNS := sw
		if len(r.leafNS) > 0 {
			bridgeNS = r.leafNS[r.LeafOf(i)]
		}
		steps = append(steps,
			[]string{"ip", "netns", "add", ns},
			[]string{"ip", "-n", ns, "link", "set", "lo", "up"},
			[]string{"ip", "link", "add", tmp, "mtu", mtu, "netns", ns, "type", "veth", "peer", "name", port, "mtu", mtu, "netns", bridgeNS},
			[]string{"ip", "-n", ns, "link", "set", tmp, "name", "eth0"},
			[]string{"ip", "-n", ns, "addr", "add", r.WorkerIP(i) + "/24", "dev", "eth0"},
			[]string{"ip", "-n", ns, "link", "set", "eth0", "up"},
			[]string{"ip", "-n", bridgeNS, "link", "set", port, "master", "br0"},
			[]string{"ip", "-n", bridgeNS, "link", "set", port, "up"},
		)
		r.ports = append(r.ports, Port{NS: ns, Dev: "eth0", Worker: i, Up: true}, Port{NS: bridgeNS, Dev: port, Worker: i})
	}
	steps = append(steps, []string{"ip", "-n", sw, "link", "set", "br0", "up"})
	for _, s := range steps {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("rack: building interrupted: %w", err)
		}
		if err := run(s...); err != nil {
			return err
		}
	}
	if r.cfg.RateMbit > 0 {
		return r.SetRate(r.cfg.RateMbit)
	}
	return nil
}

// SetRate reshapes every port to rateMbit in both directions (zero removes
// the shaping). Config.BurstBytes and LimitBytes still apply when set.
func (r *Rack) SetRate(rateMbit float64) error {
	if rateMbit < 0 {
		return fmt.Errorf("rack: rate %v must not be negative", rateMbit)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return errors.New("rack: closed")
	}
	for _, p := range r.ports {
		rate := rateMbit
		if p.Trunk() {
			rate *= r.cfg.TrunkRatio
		}
		burst, limit := r.shaping(rate)
		var err error
		if rateMbit == 0 {
			// Deleting a root qdisc that is not there fails; that is fine.
			_ = run("tc", "-n", p.NS, "qdisc", "del", "dev", p.Dev, "root")
		} else {
			err = run("tc", "-n", p.NS, "qdisc", "replace", "dev", p.Dev, "root", "tbf",
				"rate", fmtRate(rate), "burst", strconv.Itoa(burst), "limit", strconv.Itoa(limit))
		}
		if err != nil {
			return err
		}
	}
	r.rate = rateMbit
	return nil
}

func (r *Rack) shaping(rateMbit float64) (burst, limit int) {
	burst, limit = Shaping(rateMbit, r.cfg.MTU)
	if r.cfg.BurstBytes > 0 {
		burst = r.cfg.BurstBytes
	}
	if r.cfg.LimitBytes > 0 {
		limit = r.cfg.LimitBytes
	}
	return burst, limit
}

// Shape reports the current rate and the tbf burst and limit of every port.
func (r *Rack) Shape() (rateMbit float64, burst, limit int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.rate == 0 {
		return 0, 0, 0
	}
	burst, limit = r.shaping(r.rate)
	return r.rate, burst, limit
}

func fmtRate(mbit float64) string {
	return strconv.FormatInt(int64(mbit*1000+0.5), 10) + "kbit"
}

// Workers is the number of worker namespaces.
func (r *Rack) Workers() int { return len(r.workerNS) }

// SwitchNS is the name of the switch's namespace (it holds the bridge).
func (r *Rack) SwitchNS() string { return r.switchNS }

// WorkerNS is the name of worker i's namespace.
func (r *Rack) WorkerNS(i int) string { return r.workerNS[i] }

// SwitchIP is the bridge's address, reachable from every worker (the
// spine's, in a tree).
func (r *Rack) SwitchIP() string { return r.addr(1) }

// Leaves is the number of leaves (0: a flat rack).
func (r *Rack) Leaves() int { return len(r.leafNS) }

// LeafNS is the name of leaf k's namespace.
func (r *Rack) LeafNS(k int) string { return r.leafNS[k] }

// LeafIP is the address of leaf k's bridge.
func (r *Rack) LeafIP(k int) string { return r.addr(2 + k) }

// LeafOf is the leaf worker i sits under (0 in a flat rack).
func (r *Rack) LeafOf(i int) int {
	if len(r.leafNS) == 0 {
		return 0
	}
	return i % len(r.leafNS)
}

// TrunkRatio is the trunks' rate over the ports' (0 in a flat rack).
func (r *Rack) TrunkRatio() float64 {
	if len(r.leafNS) == 0 {
		return 0
	}
	return r.cfg.TrunkRatio
}

// WorkerIP is worker i's address (on its eth0).
func (r *Rack) WorkerIP(i int) string { return r.addr(10 + i) }

func (r *Rack) addr(host int) string {
	b := r.base.As4()
	b[3] += byte(host)
	return netip.AddrFrom4(b).String()
}

// Ports lists the shaped interfaces: each leaf's trunk up then down, then
// for each worker, its upload port then its download port.
func (r *Rack) Ports() []Port { return append([]Port(nil), r.ports...) }

// Command returns a command that runs name in namespace ns (through
// ip netns exec, which execs name in place: the process id is name's).
func (r *Rack) Command(ctx context.Context, ns, name string, args ...string) *exec.Cmd {
	return exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", ns, name}, args...)...)
}

// Do runs f on an OS thread that has entered namespace ns. Sockets f opens
// belong to ns for their whole life and may be used from any goroutine
// afterwards; goroutines f starts do not inherit the namespace.
func (r *Rack) Do(ns string, f func() error) error {
	return Do(ns, f)
}

// Do runs f on an OS thread that has entered the named network namespace
// (one made by ip netns add).
func Do(ns string, f func() error) error {
	target, err := os.Open("/var/run/netns/" + ns)
	if err != nil {
		return fmt.Errorf("rack: namespace %s: %w", ns, err)
	}
	defer target.Close()
	runtime.LockOSThread()
	self, err := os.Open(fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid()))
	if err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("rack: own namespace: %w", err)
	}
	defer self.Close()
	if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("rack: enter namespace %s: %w", ns, err)
	}
	ferr := f()
	if err := unix.Setns(int(self.Fd()), unix.CLONE_NEWNET); err != nil {
		// Leave the thread locked: it ends with this goroutine instead of
		// running other goroutines in the wrong namespace.
		return errors.Join(ferr, fmt.Errorf("rack: leave namespace %s: %w", ns, err))
	}
	runtime.UnlockOSThread()
	return ferr
}

// QdiscStats are the counters of one port's tbf qdisc.
type QdiscStats struct {
	Port
	Bytes      uint64 `json:"bytes"`
	Packets    uint64 `json:"packets"`
	Drops      uint64 `json:"drops"`
	Overlimits uint64 `json:"overlimits"`
	Requeues   uint64 `json:"requeues"`
}

// Stats reads the qdisc counters of every port (tc -s qdisc). Counters only
// grow while the rack lives (SetRate keeps them when it replaces a tbf).
func (r *Rack) Stats() ([]QdiscStats, error) {
	var out []QdiscStats
	for _, p := range r.Ports() {
		b, err := output("tc", "-n", p.NS, "-s", "-j", "qdisc", "show", "dev", p.Dev, "root")
		if err != nil {
			return nil, err
		}
		var qs []struct {
			Kind       string `json:"kind"`
			Bytes      uint64 `json:"bytes"`
			Packets    uint64 `json:"packets"`
			Drops      uint64 `json:"drops"`
			Overlimits uint64 `json:"overlimits"`
			Requeues   uint64 `json:"requeues"`
		}
		if err := json.Unmarshal(b, &qs); err != nil {
			return nil, fmt.Errorf("rack: parse tc -j output for %s/%s: %w", p.NS, p.Dev, err)
		}
		s := QdiscStats{Port: p}
		for _, q := range qs {
			if q.Kind == "tbf" {
				s.Bytes, s.Packets, s.Drops, s.Overlimits, s.Requeues = q.Bytes, q.Packets, q.Drops, q.Overlimits, q.Requeues
			}
		}
		out = append(out, s)
	}
	return out, nil
}

// Close kills what still runs in the rack's namespaces and deletes them
// (which deletes the veth pairs and the bridge). It is idempotent.
func (r *Rack) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return r.closeError
	}
	r.closed = true
	r.closeError = Cleanup(r.cfg.Prefix)
	return r.closeError
}

// Cleanup removes every namespace and root-namespace interface named by
// prefix, killing the processes left in those namespaces first: the remains
// of a rack whose owner crashed.
func Cleanup(prefix string) error {
	if !prefixRE.MatchString(prefix) {
		return fmt.Errorf("rack: Prefix %q: want 1..8 characters of [a-z0-9], starting with a letter", prefix)
	}
	mine := regexp.MustCompile(`^` + prefix + `(s|[wl][0-9]+)$`)
	var errs []error
	for _, ns := range namespaces() {
		if !mine.MatchString(ns) {
			continue
		}
		killIn(ns)
		if err := run("ip", "netns", "del", ns); err != nil {
			errs = append(errs, err)
		}
	}
	// A veth pair is created in the root namespace only if a build failed
	// between creating and moving it; normally there is nothing to do.
	if b, err := output("ip", "-o", "link", "show"); err == nil {
		dev := regexp.MustCompile(`^\d+: (` + prefix + `[vt][0-9]+)[@:]`)
		for _, line := range strings.Split(string(b), "\n") {
			if m := dev.FindStringSubmatch(line); m != nil {
				if err := run("ip", "link", "del", m[1]); err != nil {
					errs = append(errs, err)
				}
			}
		}
	}
	return errors.Join(errs...)
}

// Namespaces lists the rack namespaces that exist with this prefix.
func Namespaces(prefix string) []string {
	mine := regexp.MustCompile(`^` + regexp.QuoteMeta(prefix) + `(s|[wl][0-9]+)$`)
	var out []string
	for _, ns := range namespaces() {
		if mine.MatchString(ns) {
			out = append(out, ns)
		}
	}
	return out
}

func namespaces() []string {
	b, err := output("ip", "netns", "list")
	if err != nil {
		return nil
	}
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 0 {
			out = append(out, f[0])
		}
	}
	return out
}

// killIn ends the processes still running in namespace ns: politely, then
// after a grace period for good.
func killIn(ns string) {
	pids := func() []int {
		b, _ := output("ip", "netns", "pids", ns)
		var ps []int
		for _, f := range strings.Fields(string(b)) {
			if p, err := strconv.Atoi(f); err == nil && p != os.Getpid() {
				ps = append(ps, p)
			}
		}
		return ps
	}
	ps := pids()
	if len(ps) == 0 {
		return
	}
	for _, p := range ps {
		syscall.Kill(p, syscall.SIGTERM)
	}
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) {
		if ps = pids(); len(ps) == 0 {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	for _, p := range ps {
		syscall.Kill(p, syscall.SIGKILL)
	}
}

func run(args ...string) error {
	_, err := output(args...)
	return err
}

func output(args ...string) ([]byte, error) {
	cmd := exec.Command(args[0], args[1:]...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return out, fmt.Errorf("rack: %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return out, nil
}
