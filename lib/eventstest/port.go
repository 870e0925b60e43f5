package eventstest

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// FreePort returns a loopback port nobody listens on right now, for a
// process a test starts (and may restart on the same port).
//
// The port comes from below the kernel's ephemeral range: a port the
// kernel hands out (a listen on :0, the local end of every outgoing
// connection) may be taken again by the time the process binds it, or
// while it is down for a restart. Ports given out in this process are
// not given again.
func FreePort(t testing.TB) int {
	t.Helper()
	low := ephemeralLow()
	portMu.Lock()
	defer portMu.Unlock()
	for range 1000 {
		port := 10000 + rand.IntN(low-10000)
		if portsTaken[port] {
			continue
		}
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			continue
		}
		_ = l.Close()
		portsTaken[port] = true
		return port
	}
	t.Fatal("no free port below the ephemeral range")
	return 0
}

var (
	portMu     sync.Mutex
	portsTaken = map[int]bool{}
)

// ephemeralLow is the first port of the kernel's ephemeral range (32768
// when it cannot be read).
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 32768
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 32768
	}
	n, err := strconv.Atoi(f[0])
	if err != nil || n <= 12000 {
		return 32768
	}
	return n
}
