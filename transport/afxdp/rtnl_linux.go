package afxdp

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// rtnl is a route netlink socket. It answers for the network namespace it
// was opened in, whichever thread asks later.
type rtnl struct {
	mu   sync.Mutex
	fd   int
	seq  uint32
	buf  []byte
	msgs []nlMessage
}

func openRTNL() (*rtnl, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_ROUTE)
	if err != nil {
		return nil, fmt.Errorf("afxdp: cannot open a route netlink socket: %w", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("afxdp: cannot bind a route netlink socket: %w", err)
	}
	// A reply never takes long; a timeout keeps a lost one from hanging
	// a sender.
	tv := unix.Timeval{Sec: 1}
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("afxdp: cannot set a timeout on a route netlink socket: %w", err)
	}
	return &rtnl{fd: fd, buf: make([]byte, 64<<10)}, nil
}

func (r *rtnl) close() error { return unix.Close(r.fd) }

// query sends a request of type typ with body and calls fn with each
// message of the reply (a dump's many, or the single answer).
func (r *rtnl) query(typ uint16, dump bool, body []byte, fn func(m nlMessage)) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.seq++
	flags := uint16(unix.NLM_F_REQUEST)
	if dump {
		flags |= unix.NLM_F_DUMP
	}
	req := make([]byte, nlmsgHdrLen, nlmsgHdrLen+len(body))
	binary.NativeEndian.PutUint32(req[0:4], uint32(nlmsgHdrLen+len(body)))
	binary.NativeEndian.PutUint16(req[4:6], typ)
	binary.NativeEndian.PutUint16(req[6:8], flags)
	binary.NativeEndian.PutUint32(req[8:12], r.seq)
	req = append(req, body...)
	if err := unix.Sendto(r.fd, req, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return err
	}
	for {
		n, _, err := unix.Recvfrom(r.fd, r.buf, 0)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return err
		}
		r.msgs = parseMessages(r.buf[:n], r.msgs[:0])
		for _, m := range r.msgs {
			if m.seq != r.seq {
				continue
			}
			switch m.typ {
			case unix.NLMSG_DONE:
				return nil
			case unix.NLMSG_ERROR:
				if len(m.data) < 4 {
					return errors.New("short netlink error message")
				}
				if e := int32(binary.NativeEndian.Uint32(m.data[0:4])); e != 0 {
					return syscall.Errno(-e)
				}
				return nil
			default:
				fn(m)
				if !dump {
					return nil
				}
			}
		}
	}
}

// route is the kernel's routing decision for a destination.
type route struct {
	typ uint8 // RTN_UNICAST, RTN_LOCAL, ...
	oif int
	gw  [4]byte
	via bool // gw is set
}

// routeTo asks the kernel how it would send to dst.
func (r *rtnl) routeTo(dst [4]byte) (route, error) {
	body := make([]byte, unix.SizeofRtMsg, unix.SizeofRtMsg+8)
	body[0] = unix.AF_INET
	body[1] = 32 // dst_len
	body = appendAttr(body, unix.RTA_DST, dst[:])
	var rt route
	found := false
	err := r.query(unix.RTM_GETROUTE, false, body, func(m nlMessage) {
		if m.typ != unix.RTM_NEWROUTE || len(m.data) < unix.SizeofRtMsg {
			return
		}
		found = true
		rt.typ = m.data[7]
		for _, a := range parseAttrs(m.data[unix.SizeofRtMsg:], nil) {
			switch a.typ {
			case unix.RTA_OIF:
				if len(a.data) >= 4 {
					rt.oif = int(binary.NativeEndian.Uint32(a.data))
				}
			case unix.RTA_GATEWAY:
				if len(a.data) == 4 {
					rt.gw = [4]byte(a.data)
					rt.via = true
				}
			}
		}
	})
	if err == nil && !found {
		err = errors.New("no route in the reply")
	}
	return rt, err
}

// nudValid are the neighbour states whose link-layer address can be used.
const nudValid = unix.NUD_PERMANENT | unix.NUD_NOARP | unix.NUD_REACHABLE | unix.NUD_PROBE | unix.NUD_STALE | unix.NUD_DELAY

// neighbour looks ip up in the kernel's IPv4 neighbour table of ifindex.
func (r *rtnl) neighbour(ifindex int, ip [4]byte) (mac [6]byte, ok bool, err error) {
	body := make([]byte, unix.SizeofNdMsg)
	body[0] = unix.AF_INET
	binary.NativeEndian.PutUint32(body[4:8], uint32(ifindex))
	var attrs []nlAttr
	err = r.query(unix.RTM_GETNEIGH, true, body, func(m nlMessage) {
		if ok || m.typ != unix.RTM_NEWNEIGH || len(m.data) < unix.SizeofNdMsg {
			return
		}
		if m.data[0] != unix.AF_INET || int(binary.NativeEndian.Uint32(m.data[4:8])) != ifindex {
			return
		}
		if binary.NativeEndian.Uint16(m.data[8:10])&nudValid == 0 {
			return
		}
		var dst, ll []byte
		attrs = parseAttrs(m.data[unix.SizeofNdMsg:], attrs[:0])
		for _, a := range attrs {
			switch a.typ {
			case unix.NDA_DST:
				dst = a.data
			case unix.NDA_LLADDR:
				ll = a.data
			}
		}
		if len(dst) == 4 && [4]byte(dst) == ip && len(ll) == 6 {
			mac = [6]byte(ll)
			ok = true
		}
	})
	return mac, ok, err
}

// xdpState is what is attached at an interface's XDP hook.
type xdpState struct {
	attached uint8 // XDP_ATTACHED_NONE (0), DRV, SKB, HW, MULTI
	progID   uint32
}

func (s xdpState) mode() string {
	switch s.attached {
	case 0:
		return "none"
	case 1:
		return "native"
	case 2:
		return "generic"
	case 3:
		return "offloaded"
	}
	return "several modes"
}

// linkXDP reports the XDP program attached to ifindex.
func (r *rtnl) linkXDP(ifindex int) (xdpState, error) {
	body := make([]byte, unix.SizeofIfInfomsg)
	body[0] = unix.AF_UNSPEC
	binary.NativeEndian.PutUint32(body[4:8], uint32(ifindex))
	var st xdpState
	err := r.query(unix.RTM_GETLINK, false, body, func(m nlMessage) {
		if m.typ != unix.RTM_NEWLINK || len(m.data) < unix.SizeofIfInfomsg {
			return
		}
		for _, a := range parseAttrs(m.data[unix.SizeofIfInfomsg:], nil) {
			if a.typ != unix.IFLA_XDP {
				continue
			}
			for _, x := range parseAttrs(a.data, nil) {
				switch x.typ {
				case unix.IFLA_XDP_ATTACHED:
					if len(x.data) >= 1 {
						st.attached = x.data[0]
					}
				case unix.IFLA_XDP_PROG_ID:
					if len(x.data) >= 4 {
						st.progID = binary.NativeEndian.Uint32(x.data)
					}
				}
			}
		}
	})
	return st, err
}
