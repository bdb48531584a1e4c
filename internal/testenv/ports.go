package testenv

import (
	"net"
	"sync"
)

// handedOut are the ports FreshPort returned in this process.
var handedOut = struct {
	sync.Mutex
	m map[int]bool
}{m: map[int]bool{}}

// FreshPort returns host:port with a port free on ip right now and never
// returned before in this process. Picked one after another, each
// listener closed before the next, the kernel now and then hands out a
// port it just gave (Go's listeners set SO_REUSEADDR), and two servers
// told the same address fail ("address already in use", or etcd's
// "duplicate url").
func FreshPort(ip string) (string, int, error) {
	for {
		ln, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
		if err != nil {
			return "", 0, err
		}
		addr := ln.Addr().(*net.TCPAddr)
		ln.Close()
		handedOut.Lock()
		fresh := !handedOut.m[addr.Port]
		handedOut.m[addr.Port] = true
		handedOut.Unlock()
		if fresh {
			return addr.String(), addr.Port, nil
		}
	}
}
