package afxdp

import (
	"encoding/binary"
	"fmt"
	"net/netip"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
)

// portKeySize is the size of a key of the ports map: the destination IPv4
// address (4 bytes) and UDP port (2 bytes), both in network byte order, as
// they sit in the packet.
const portKeySize = 6

// maxConnsPerDevice bounds the ports map: the Conns of one interface and
// queue.
const maxConnsPerDevice = 1024

func portKey(a netip.AddrPort) [portKeySize]byte {
	var k [portKeySize]byte
	ip := a.Addr().Unmap().As4()
	copy(k[:4], ip[:])
	binary.BigEndian.PutUint16(k[4:], a.Port())
	return k
}

// xdpPass and friends are the XDP verdicts.
const xdpPass = 2

// Offsets in struct xdp_md.
const (
	mdData         = 0
	mdDataEnd      = 4
	mdRxQueueIndex = 16
)

// progConfig are the choices baked into the program.
type progConfig struct {
	// maxLen is the longest frame steered to the socket; longer ones
	// (which the socket could not take) go to the kernel.
	maxLen int
	// generic: the program runs on socket buffers, which may be
	// segmentation-offload super-packets of a sender on this host (one
	// IPv4 and UDP header for many datagrams). Those always carry an
	// unfinished UDP checksum (the pseudo-header sum that offload
	// completes), so packets whose checksum field holds exactly that go
	// to the kernel, which splits them.
	generic bool
}

// program is the XDP program: it sends UDP over IPv4 (after at most one
// 802.1Q tag, unfragmented) whose destination address and port are in
// ports to the AF_XDP socket of the receive queue in xsks, and passes
// everything else to the kernel. The halfword loads read network byte
// order, so constants compared against them are byte-swapped on a little-
// endian machine; one's complement sums come out byte-swapped the same
// way (RFC 1071), so they compare directly with loaded checksums.
func program(ports, xsks *ebpf.Map, cfg progConfig) asm.Instructions {
	be16 := func(v uint16) int32 {
		var b [2]byte
		binary.BigEndian.PutUint16(b[:], v)
		return int32(binary.NativeEndian.Uint16(b[:]))
	}
	const (
		ctx  = asm.R6
		data = asm.R7
		end  = asm.R8
		sum  = asm.R9
	)
	insns := asm.Instructions{
		asm.Mov.Reg(ctx, asm.R1),
		asm.LoadMem(data, ctx, mdData, asm.Word),
		asm.LoadMem(end, ctx, mdDataEnd, asm.Word),

		// Too long for a frame of the socket: the kernel's.
		asm.Mov.Reg(asm.R2, data),
		asm.Add.Imm(asm.R2, int32(cfg.maxLen)),
		asm.JGT.Reg(end, asm.R2, "pass"),

		// Ethernet header, then possibly one VLAN tag.
		asm.Mov.Reg(asm.R2, data),
		asm.Add.Imm(asm.R2, ethHeaderLen),
		asm.JGT.Reg(asm.R2, end, "pass"),
		asm.LoadMem(asm.R3, data, 12, asm.Half),
		asm.JNE.Imm(asm.R3, be16(etherTypeVLAN), "ether"),
		asm.Mov.Reg(asm.R2, data),
		asm.Add.Imm(asm.R2, ethHeaderLen+vlanTagLen),
		asm.JGT.Reg(asm.R2, end, "pass"),
		asm.LoadMem(asm.R3, data, 16, asm.Half),
		asm.Add.Imm(data, vlanTagLen),

		// From here data+14 is the IPv4 header.
		asm.JNE.Imm(asm.R3, be16(etherTypeIPv4), "pass").WithSymbol("ether"),
		asm.Mov.Reg(asm.R2, data),
		asm.Add.Imm(asm.R2, ethHeaderLen+ipv4HeaderLen),
		asm.JGT.Reg(asm.R2, end, "pass"),
		asm.LoadMem(asm.R3, data, ethHeaderLen, asm.Byte),
		asm.Mov.Reg(asm.R4, asm.R3),
		asm.And.Imm(asm.R4, 0xf0),
		asm.JNE.Imm(asm.R4, 0x40, "pass"),
		asm.And.Imm(asm.R3, 0x0f),
		asm.JLT.Imm(asm.R3, 5, "pass"),
		asm.LoadMem(asm.R4, data, ethHeaderLen+9, asm.Byte),
		asm.JNE.Imm(asm.R4, protoUDP, "pass"),
		// Fragments (more fragments set or a nonzero offset) go to the
		// kernel, which reassembles them.
		asm.LoadMem(asm.R4, data, ethHeaderLen+6, asm.Half),
		asm.And.Imm(asm.R4, be16(0x3fff)),
		asm.JNE.Imm(asm.R4, 0, "pass"),
		// Key: destination address, then destination port.
		asm.LoadMem(asm.R4, data, ethHeaderLen+16, asm.Word),
		asm.StoreMem(asm.RFP, -8, asm.R4, asm.Word),
	}
	if cfg.generic {
		// Pseudo-header sum: addresses and protocol (the UDP length
		// follows below).
		insns = append(insns, asm.Mov.Imm(sum, be16(protoUDP)))
		for off := int16(12); off < 20; off += 2 {
			insns = append(insns,
				asm.LoadMem(asm.R4, data, ethHeaderLen+off, asm.Half),
				asm.Add.Reg(sum, asm.R4),
			)
		}
	}
	insns = append(insns,
		// Skip the IPv4 header by its length (20 to 60 bytes).
		asm.LSh.Imm(asm.R3, 2),
		asm.Add.Reg(data, asm.R3),
		asm.Mov.Reg(asm.R2, data),
		asm.Add.Imm(asm.R2, ethHeaderLen+udpHeaderLen),
		asm.JGT.Reg(asm.R2, end, "pass"),
		asm.LoadMem(asm.R4, data, ethHeaderLen+2, asm.Half),
		asm.StoreMem(asm.RFP, -4, asm.R4, asm.Half),
	)
	if cfg.generic {
		insns = append(insns,
			asm.LoadMem(asm.R5, data, ethHeaderLen+6, asm.Half),
			asm.JEq.Imm(asm.R5, 0, "lookup"), // no checksum: not offloaded
			asm.LoadMem(asm.R4, data, ethHeaderLen+4, asm.Half),
			asm.Add.Reg(sum, asm.R4),
			asm.Mov.Reg(asm.R4, sum),
			asm.RSh.Imm(asm.R4, 16),
			asm.And.Imm(sum, 0xffff),
			asm.Add.Reg(sum, asm.R4),
			asm.Mov.Reg(asm.R4, sum),
			asm.RSh.Imm(asm.R4, 16),
			asm.And.Imm(sum, 0xffff),
			asm.Add.Reg(sum, asm.R4),
			asm.JEq.Reg(asm.R5, sum, "pass"),
		)
	}
	insns = append(insns,
		asm.LoadMapPtr(asm.R1, ports.FD()).WithSymbol("lookup"),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, -8),
		asm.FnMapLookupElem.Call(),
		asm.JEq.Imm(asm.R0, 0, "pass"),

		// To the socket of this receive queue, or to the kernel if there
		// is none.
		asm.LoadMapPtr(asm.R1, xsks.FD()),
		asm.LoadMem(asm.R2, ctx, mdRxQueueIndex, asm.Word),
		asm.Mov.Imm(asm.R3, xdpPass),
		asm.FnRedirectMap.Call(),
		asm.Return(),

		asm.Mov.Imm(asm.R0, xdpPass).WithSymbol("pass"),
		asm.Return(),
	)
	return insns
}

// progObjects are the XDP program and its maps.
type progObjects struct {
	prog  *ebpf.Program
	ports *ebpf.Map
	xsks  *ebpf.Map
}

func (o *progObjects) close() {
	if o.prog != nil {
		o.prog.Close()
	}
	if o.ports != nil {
		o.ports.Close()
	}
	if o.xsks != nil {
		o.xsks.Close()
	}
}

// newProgObjects creates the maps; queues bounds the receive queue
// numbers the socket map can hold.
func newProgObjects(queues int) (*progObjects, error) {
	o := &progObjects{}
	var err error
	o.ports, err = ebpf.NewMap(&ebpf.MapSpec{
		Name:       "smlx_ports",
		Type:       ebpf.Hash,
		KeySize:    portKeySize,
		ValueSize:  1,
		MaxEntries: maxConnsPerDevice,
	})
	if err != nil {
		return nil, fmt.Errorf("cannot create the BPF port map: %w (needs CAP_BPF or root)", err)
	}
	o.xsks, err = ebpf.NewMap(&ebpf.MapSpec{
		Name:       "smlx_xsks",
		Type:       ebpf.XSKMap,
		KeySize:    4,
		ValueSize:  4,
		MaxEntries: uint32(queues),
	})
	if err != nil {
		o.close()
		return nil, fmt.Errorf("cannot create the BPF socket map: %w", err)
	}
	return o, nil
}

// load loads the program for cfg, replacing one loaded before.
func (o *progObjects) load(cfg progConfig) error {
	if o.prog != nil {
		o.prog.Close()
		o.prog = nil
	}
	p, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Name:         "smlx_steer",
		Type:         ebpf.XDP,
		Instructions: program(o.ports, o.xsks, cfg),
		License:      "Dual MIT/GPL",
	})
	if err != nil {
		return fmt.Errorf("cannot load the XDP program: %w", err)
	}
	o.prog = p
	return nil
}

// probeProgram loads a program that passes everything, to see whether
// this process may load XDP programs at all.
func probeProgram() error {
	p, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Type:         ebpf.XDP,
		Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, xdpPass), asm.Return()},
		License:      "Dual MIT/GPL",
	})
	if err != nil {
		return err
	}
	return p.Close()
}
