package softswitch

import (
	"bufio"
	"fmt"
	"net/netip"
	"os"
	"strconv"
	"strings"
)

// udpSocketDrops returns the kernel's drop count of the UDP socket bound to
// local, from /proc/net/udp or /proc/net/udp6 of this network namespace
// (the last column): datagrams lost because the socket's receive queue was
// full, the switch's ingress queue drops. ok is false where the kernel does
// not say (not Linux, no such socket).
func udpSocketDrops(local netip.AddrPort) (drops uint64, ok bool) {
	port := fmt.Sprintf(":%04X", local.Port())
	for _, path := range []string{"/proc/net/udp", "/proc/net/udp6"} {
		f, err := os.Open(path)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(f)
		sc.Scan() // header
		for sc.Scan() {
			fields := strings.Fields(sc.Text())
			// sl local rem st tx:rx tr:when retrnsmt uid timeout inode ref pointer drops
			if len(fields) < 13 || !strings.HasSuffix(fields[1], port) {
				continue
			}
			if n, err := strconv.ParseUint(fields[12], 10, 64); err == nil {
				f.Close()
				return n, true
			}
		}
		f.Close()
	}
	return 0, false
}
