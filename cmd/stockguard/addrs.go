package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/stockguard/stockguard/internal/cliflag"
)

// lockServers is, for each backend that dials servers of its own, the flag
// that lists them and how many it needs at least. The backends' constructors
// count them too; checking here, before anything is dialled, makes a
// mistake a usage error that names the flag, where a client library would
// only log its dial failures and every write would answer 503.
var lockServers = map[string]struct {
	flag string
	min  int
}{
	"redis":     {"redis-addrs", 1},
	"redlock":   {"redis-addrs", 3}, // a majority of at least two must survive one node's loss
	"zookeeper": {"zk-servers", 1},
	"etcd":      {"etcd-endpoints", 1},
}

// badValue is the usage error for flag's value, naming the flag and its
// variable. A value that may hold a secret is not repeated.
func badValue(flag, value string, reason error) error {
	shown := fmt.Sprintf("=%q", value)
	if flag == "database-url" {
		shown = ""
	}
	return fmt.Errorf("%w: --%s%s (%s): %w", errUsage, flag, shown, cliflag.EnvName(envPrefix, flag), reason)
}

// checkAddrs checks every address serve will listen on or dial, before
// anything touches a server.
func (c *config) checkAddrs() error {
	if err := checkHostPort(c.addr, true); err != nil {
		return badValue("addr", c.addr, err)
	}
	if c.limits.metricsAddr != "" {
		if err := checkHostPort(c.limits.metricsAddr, true); err != nil {
			return badValue("metrics-addr", c.limits.metricsAddr, err)
		}
	}
	if err := c.checkListeners(); err != nil {
		return err
	}
	if err := checkDatabaseURL(c.databaseURL); err != nil {
		return err
	}
	ls, ok := lockServers[c.lock]
	if !ok {
		return nil // postgres uses the database; none and local dial nothing
	}
	value := map[string]string{"redis-addrs": c.redisAddrs, "zk-servers": c.zkServers, "etcd-endpoints": c.etcdEndpoints}[ls.flag]
	list := cliflag.SplitList(value)
	if len(list) < ls.min {
		return badValue(ls.flag, value, fmt.Errorf("--lock=%s needs at least %d server(s), got %d", c.lock, ls.min, len(list)))
	}
	check := checkServerAddr
	if ls.flag == "etcd-endpoints" {
		check = checkEtcdEndpoint
	}
	servers := make([]server, len(list))
	for i, a := range list {
		if err := check(a); err != nil {
			return badValue(ls.flag, value, fmt.Errorf("%q: %w", a, err))
		}
		// The same server twice, however spelled (127.0.0.1:06391,
		// localhost:6391), would be counted as two: a Redlock quorum that
		// looks like it survives a node's loss would need every server.
		servers[i] = newServer(a)
		for j, b := range servers[:i] {
			if b.same(servers[i]) {
				return badValue(ls.flag, value, fmt.Errorf("%q and %q are the same server", list[j], a))
			}
		}
	}
	return nil
}

// checkListeners refuses two of serve's listeners on one port: the second
// would fail only after every server has been dialled and the migrations
// run.
func (c *config) checkListeners() error {
	type listener struct{ flag, addr string }
	ls := []listener{{"addr", c.addr}}
	if c.limits.metricsAddr != "" {
		ls = append(ls, listener{"metrics-addr", c.limits.metricsAddr})
	}
	if c.debugAddr != "" {
		ls = append(ls, listener{"debug-addr", c.debugAddr})
	}
	for i, a := range ls {
		for _, b := range ls[:i] {
			if sameListener(a.addr, b.addr) {
				return badValue(a.flag, a.addr, fmt.Errorf("the port of --%s=%q", b.flag, b.addr))
			}
		}
	}
	return nil
}

// sameListener reports whether listeners on a and b (valid listen
// addresses) would take the same port: a fixed port, on the same host or
// where either listens on every interface.
func sameListener(a, b string) bool {
	ha, pa, _ := net.SplitHostPort(a)
	hb, pb, _ := net.SplitHostPort(b)
	na, _ := strconv.ParseUint(pa, 10, 16)
	nb, _ := strconv.ParseUint(pb, 10, 16)
	if na == 0 || na != nb {
		return false
	}
	every := func(h string) bool { return h == "" || h == "0.0.0.0" || h == "::" }
	return every(ha) || every(hb) || hostKey(ha) == hostKey(hb)
}

// server is a server address as checkAddrs compares them: its port and
// its host's addresses once resolved (a name that does not resolve stands
// for itself), or, for a unix socket, the address itself.
type server struct {
	raw  string
	port uint64
	ips  []string
}

func newServer(addr string) server {
	h, p, ok := serverHostPort(addr)
	if !ok {
		return server{raw: addr}
	}
	return server{port: p, ips: resolve(h)}
}

// same reports whether s and o name the same server.
func (s server) same(o server) bool {
	if s.raw != "" || o.raw != "" {
		return s.raw == o.raw
	}
	if s.port != o.port {
		return false
	}
	for _, x := range s.ips {
		if slices.Contains(o.ips, x) {
			return true
		}
	}
	return false
}

// serverHostPort splits a server address or an http(s) endpoint; ok is
// false for anything else (a unix socket).
func serverHostPort(addr string) (host string, port uint64, ok bool) {
	if strings.Contains(addr, "://") {
		u, err := url.Parse(addr)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") {
			return "", 0, false
		}
		addr = u.Host
	}
	h, p, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, false
	}
	n, err := strconv.ParseUint(p, 10, 16)
	return h, n, err == nil
}

// resolve returns host's addresses, each in its canonical form; a name
// that does not resolve within a second is itself, lower-cased.
func resolve(host string) []string {
	if ip := net.ParseIP(host); ip != nil {
		return []string{ip.String()}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	addrs, err := net.DefaultResolver.LookupHost(ctx, host)
	if err != nil || len(addrs) == 0 {
		return []string{strings.ToLower(host)}
	}
	out := make([]string, 0, len(addrs))
	for _, a := range addrs {
		if ip := net.ParseIP(a); ip != nil {
			out = append(out, ip.String())
		}
	}
	return out
}

// hostKey is a listen host as sameListener compares it: localhost is the
// loopback address it listens on.
func hostKey(h string) string {
	if strings.EqualFold(h, "localhost") {
		return "127.0.0.1"
	}
	if ip := net.ParseIP(h); ip != nil {
		return ip.String()
	}
	return strings.ToLower(h)
}

func checkDatabaseURL(s string) error {
	// pgx parses the URL the same way when the pool connects; its error
	// hides the password.
	if _, err := pgx.ParseConfig(s); err != nil {
		return badValue("database-url", s, err)
	}
	return nil
}

// checkHostPort accepts host:port with a numeric port; a listen address
// may leave the host empty (every interface) and ask for port 0 (any).
func checkHostPort(addr string, listen bool) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("want host:port: %w", err)
	}
	if host == "" && !listen {
		return errors.New("want host:port: the host is empty")
	}
	n, err := strconv.ParseUint(port, 10, 16)
	if err != nil || (n == 0 && !listen) {
		return fmt.Errorf("want host:port: bad port %q", port)
	}
	return nil
}

func checkServerAddr(addr string) error { return checkHostPort(addr, false) }

// checkEtcdEndpoint accepts what the etcd client dials: host:port,
// http(s)://host:port, or a unix(s):// socket path.
func checkEtcdEndpoint(ep string) error {
	if !strings.Contains(ep, "://") {
		return checkServerAddr(ep)
	}
	u, err := url.Parse(ep)
	if err != nil {
		return err
	}
	switch u.Scheme {
	case "http", "https":
		if u.Path != "" && u.Path != "/" {
			return errors.New("an endpoint has no path")
		}
		return checkServerAddr(u.Host)
	case "unix", "unixs":
		if u.Host+u.Path == "" {
			return errors.New("no socket path")
		}
		return nil
	}
	return fmt.Errorf("scheme %q: want host:port, http://host:port, https://host:port or unix://path", u.Scheme)
}

// isLoopback reports whether a listener on host is reachable from this
// machine only. An empty host is every interface.
func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// warnOpenAdmin says at start that stock can be set by anyone who reaches
// addr: without an admin token PUT /v1/skus asks for nothing, which suits
// a loopback demo and nothing else.
func warnOpenAdmin(log *slog.Logger, addr, adminToken string) {
	if adminToken != "" {
		return
	}
	if host, _, err := net.SplitHostPort(addr); err == nil && isLoopback(host) {
		return
	}
	log.Warn("no admin token (--admin-token, STOCKGUARD_ADMIN_TOKEN) and --addr is not loopback: anyone who reaches "+
		addr+" can set stock with PUT /v1/skus", "addr", addr)
}
