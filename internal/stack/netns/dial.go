//go:build linux

package netns

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"runtime"

	"golang.org/x/sys/unix"
)

// DialContext opens a connection from inside the member's namespace, as a
// process running there would: the socket belongs to the member, so it uses
// the member's address and a partition of the member cuts it. address must
// be an IP literal with a port (no name lookup happens inside the
// namespace). It fits redis.Options.Dialer and net/http's
// Transport.DialContext.
//
// The socket is created on an OS thread locked to a fresh goroutine that
// joins the member's namespace with setns and returns to the original one
// before the thread is unlocked; if it cannot return, the thread stays
// locked and dies with the goroutine, so no other goroutine ever runs in the
// wrong namespace.
func (m *Member) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	if _, err := netip.ParseAddrPort(address); err != nil {
		return nil, fmt.Errorf("netns: dial %s from %s: need ip:port: %w", address, m.name, err)
	}
	type result struct {
		conn net.Conn
		err  error
	}
	ch := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		conn, restored, err := m.dialInside(ctx, network, address)
		if restored {
			runtime.UnlockOSThread()
		}
		ch <- result{conn, err}
	}()
	r := <-ch
	return r.conn, r.err
}

// dialInside must run on a locked OS thread; restored reports whether the
// thread is back in its original namespace.
func (m *Member) dialInside(ctx context.Context, network, address string) (_ net.Conn, restored bool, _ error) {
	orig, err := os.Open("/proc/thread-self/ns/net")
	if err != nil {
		return nil, true, fmt.Errorf("netns: open own namespace: %w", err)
	}
	defer orig.Close()
	target, err := os.Open(netnsDir + "/" + m.namespace)
	if err != nil {
		return nil, true, fmt.Errorf("netns: open namespace of %s: %w", m.name, err)
	}
	defer target.Close()
	if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
		return nil, true, fmt.Errorf("netns: enter namespace of %s: %w", m.name, err)
	}
	// The dialer creates the socket synchronously on this thread; waiting
	// for the connect to finish happens in the poller, but the socket's
	// namespace was fixed at creation.
	var d net.Dialer
	conn, dialErr := d.DialContext(ctx, network, address)
	if err := unix.Setns(int(orig.Fd()), unix.CLONE_NEWNET); err != nil {
		if conn != nil {
			_ = conn.Close()
		}
		return nil, false, fmt.Errorf("netns: return from namespace of %s: %w", m.name, err)
	}
	if dialErr != nil {
		return nil, true, fmt.Errorf("netns: dial %s from %s: %w", address, m.name, dialErr)
	}
	return conn, true, nil
}
