package main

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"strconv"
	"strings"

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
	seen := map[string]bool{}
	for _, a := range list {
		if err := check(a); err != nil {
			return badValue(ls.flag, value, fmt.Errorf("%q: %w", a, err))
		}
		if seen[a] {
			return badValue(ls.flag, value, fmt.Errorf("%q is listed twice", a))
		}
		seen[a] = true
	}
	return nil
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
