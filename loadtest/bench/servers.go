package bench

import (
	"cmp"
	"fmt"
	"net"
	"net/url"
	"os"
	"strconv"

	"github.com/stockguard/stockguard/internal/cliflag"
	"github.com/stockguard/stockguard/internal/stack"
	"github.com/stockguard/stockguard/loadtest/bench/cpu"
	"github.com/stockguard/stockguard/loadtest/compare"
)

// serverPIDs are the lock and database servers' processes, found by the
// ports the bench's configuration names, before every measured window.
type serverPIDs struct {
	postgres, redis, zookeeper, etcd []int
	// Missing says which servers were not found; their CPU is not read.
	Missing []string
}

// findServers looks up the process listening on each server's port.
func (bc Config) findServers() serverPIDs {
	var s serverPIDs
	orList := func(v string, def []string) []string {
		if l := cliflag.SplitList(v); len(l) > 0 {
			return l
		}
		return def
	}
	groups := []struct {
		name  string
		addrs []string
		dst   *[]int
	}{
		{"postgres", []string{databaseHostPort(cmp.Or(bc.DatabaseURL, compare.DefaultDatabaseURL))}, &s.postgres},
		{"redis", orList(bc.RedisAddrs, stack.RedisAddrs()), &s.redis},
		{"zookeeper", orList(bc.ZKServers, stack.ZKServers()), &s.zookeeper},
		{"etcd", orList(bc.EtcdEndpoints, stack.EtcdEndpoints()), &s.etcd},
	}
	var ports []int
	for _, g := range groups {
		for _, a := range g.addrs {
			if p := portOf(a); p > 0 {
				ports = append(ports, p)
			}
		}
	}
	pids, _ := cpu.ListenerPIDs(ports) // what is missing is said per server below
	for _, g := range groups {
		for _, a := range g.addrs {
			if pid, ok := pids[portOf(a)]; ok {
				*g.dst = append(*g.dst, pid)
			} else {
				s.Missing = append(s.Missing, fmt.Sprintf("%s %s", g.name, a))
			}
		}
	}
	return s
}

// classes are the CPU meter's classes for a window in which the
// instances (or floor processes) with these PIDs served the bench.
func (s serverPIDs) classes(instances []int) []cpu.Class {
	return []cpu.Class{
		{Name: "instances", Roots: instances},
		{Name: "postgres", Roots: s.postgres, Children: true},
		{Name: "redis", Roots: s.redis},
		{Name: "zookeeper", Roots: s.zookeeper},
		{Name: "etcd", Roots: s.etcd},
		{Name: "client", Roots: []int{os.Getpid()}},
	}
}

// portOf is the port of host:port, a URL, or 0.
func portOf(addr string) int {
	if u, err := url.Parse(addr); err == nil && u.Host != "" {
		addr = u.Host
	}
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		return 0
	}
	n, _ := strconv.Atoi(p)
	return n
}

// databaseHostPort is the host:port of a postgres:// URL (5432 if none).
func databaseHostPort(u string) string {
	p, err := url.Parse(u)
	if err != nil {
		return ""
	}
	if p.Port() == "" {
		return net.JoinHostPort(p.Hostname(), "5432")
	}
	return p.Host
}
