// Package netns builds small private networks out of Linux network
// namespaces, so fault scenarios can cut links between processes (a network
// partition) without touching the host: the host's interfaces, routes and
// firewall rules stay exactly as they were, and every address used lives
// inside a namespace this package created.
//
// A Topology is one bridge namespace holding a Linux bridge, and member
// namespaces each joined to the bridge by a veth pair, each with loopback up
// and one address from a private subnet (198.18.0.0/24, the RFC 2544
// benchmarking range, which nothing on the host routes). Partitions are
// nftables drop rules inside the member namespaces; dropping (not rejecting)
// makes a cut link look like a real partition: connection attempts and
// requests time out instead of failing fast.
//
// The host namespace is deliberately not on the bridge. Code in the test or
// load tester process reaches a member in one of two ways: run a process
// inside a member (Topology.Start, which returns its PID for SIGSTOP or
// SIGKILL), or open a socket from inside a member with Member.DialContext
// (an OS thread locked to the calling goroutine switches into the member's
// namespace with setns just for the socket call, so the connection belongs to
// the member and a partition of that member cuts it too). Stockguard
// instances run as processes inside members; load clients dial from members.
//
// Every namespace name carries a per-run prefix that encodes the owning
// process (PID and start time) and a random part, so parallel runs never
// collide and Sweep can remove what a crashed run left behind without
// touching a live run's namespaces; the same goes for a run's scratch
// directories (Topology.TempDir), whose names carry the same owner. Close
// removes every namespace, process and scratch directory a Topology made;
// it is safe to call twice. Callers defer it and also trap
// SIGINT (signal.NotifyContext) so that an interrupt unwinds through it:
// processes started here also die with the parent (Pdeathsig), but
// namespaces outlive it until Close or Sweep.
//
// Everything needs root (CAP_SYS_ADMIN and CAP_NET_ADMIN), iproute2 and
// nftables; EnsureTools installs the last two with apt-get when missing.
package netns
