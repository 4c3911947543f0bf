package transport_test

import (
	"errors"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/switchml/switchml-go/transport"
	"github.com/switchml/switchml-go/transport/afxdp"
	"github.com/switchml/switchml-go/transport/shm"
)

func TestRegistryNames(t *testing.T) {
	if got, want := transport.Names(), []string{transport.UDP, afxdp.Name, shm.Name}; !slices.Equal(got, want) {
		t.Fatalf("Names() = %q, want %q", got, want)
	}
	for _, name := range []string{"", transport.UDP, afxdp.Name, shm.Name} {
		k, err := transport.Lookup(name)
		if err != nil {
			t.Fatalf("Lookup(%q): %v", name, err)
		}
		if want := cmpOr(name, transport.UDP); k.Name != want || k.Lane == nil || k.Switch == nil {
			t.Errorf("Lookup(%q) = %q (lane %v, switch %v), want %q with both factories", name, k.Name, k.Lane != nil, k.Switch != nil, want)
		}
	}
	_, err := transport.Lookup("tcp")
	if !errors.Is(err, transport.ErrUnknown) || !strings.Contains(err.Error(), `"tcp"`) || !strings.Contains(err.Error(), "udp, afxdp or shm") {
		t.Fatalf(`Lookup("tcp") = %v, want an error naming it and listing udp, afxdp or shm`, err)
	}
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

func TestRegistryRefusesDuplicates(t *testing.T) {
	k, err := transport.Lookup(shm.Name)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if recover() == nil {
			t.Fatal("registering shm a second time did not panic")
		}
	}()
	transport.Register(k)
}

// TestRegistryUDPLaneAndSwitch opens a lane and a switch socket by name and
// passes a datagram between them.
func TestRegistryUDPLaneAndSwitch(t *testing.T) {
	k, err := transport.Lookup(transport.UDP)
	if err != nil {
		t.Fatal(err)
	}
	sw, err := k.Switch(transport.SwitchSpec{Addr: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	defer sw.Close()
	lane, err := k.Lane(transport.LaneSpec{Bind: "127.0.0.1", Window: 8})
	if err != nil {
		t.Fatal(err)
	}
	defer lane.Close()
	if lane.LocalAddr().Port() == 0 || lane.LocalAddr().Addr() != netip.MustParseAddr("127.0.0.1") {
		t.Fatalf("lane bound to %v, want 127.0.0.1 and a free port", lane.LocalAddr())
	}
	if _, err := lane.WriteBatch([]transport.Message{{Buf: []byte("hi"), Addr: sw.LocalAddr()}}); err != nil {
		t.Fatal(err)
	}
	msgs := []transport.Message{{Buf: make([]byte, transport.MaxDatagram)}}
	n, err := sw.ReadBatch(msgs, time.Now().Add(time.Minute))
	if err != nil || n != 1 || string(msgs[0].Buf[:msgs[0].N]) != "hi" || msgs[0].Addr != lane.LocalAddr() {
		t.Fatalf("switch read %d datagrams (%q from %v), err %v; want \"hi\" from %v", n, msgs[0].Buf[:msgs[0].N], msgs[0].Addr, err, lane.LocalAddr())
	}
}
