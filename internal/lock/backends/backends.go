// Package backends is the one table of Stockguard's lock backends: the name
// used by --lock, whether the backend issues fencing tokens, whether two
// processes exclude each other through it, and its constructor. serve builds
// its Locker from it; the load tester and the tests read the same rows, so a
// backend added here appears everywhere at once.
package backends

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/stockguard/stockguard/internal/lock"
	"github.com/stockguard/stockguard/internal/lock/etcdlock"
	"github.com/stockguard/stockguard/internal/lock/memlock"
	"github.com/stockguard/stockguard/internal/lock/nolock"
	"github.com/stockguard/stockguard/internal/lock/pglock"
	"github.com/stockguard/stockguard/internal/lock/redislock"
	"github.com/stockguard/stockguard/internal/lock/redlock"
	"github.com/stockguard/stockguard/internal/lock/zklock"
)

// ErrConfig is wrapped by every error about missing or bad settings, so
// that the CLI can answer it as a usage error.
var ErrConfig = errors.New("backends: bad configuration")

// Params is what a constructor may need; each backend reads its own fields.
type Params struct {
	RedisAddrs    []string
	ZKServers     []string
	EtcdEndpoints []string
	DatabaseURL   string
	// TTL is the lease TTL of expiring backends (and pglock's idle bound,
	// and etcd's session lease).
	TTL        time.Duration
	Registerer prometheus.Registerer
	Logger     *slog.Logger
}

// Backend is one row of the table.
type Backend struct {
	Name string
	// Fenced says the backend's tokens increase across leases of a key, so
	// writes can be fenced. none and local have no token source.
	Fenced bool
	// Distributed says two processes exclude each other through it; local
	// excludes only within one process.
	Distributed bool
	New         func(ctx context.Context, p Params) (lock.Locker, error)
}

// All returns the table, in the order reports list the backends: the two
// that oversell first, then the real locks from the simplest up.
func All() []Backend {
	return []Backend{
		{Name: "none", New: func(context.Context, Params) (lock.Locker, error) { return nolock.New(), nil }},
		{Name: "local", New: func(context.Context, Params) (lock.Locker, error) { return memlock.New(), nil }},
		{Name: "postgres", Fenced: true, Distributed: true, New: func(ctx context.Context, p Params) (lock.Locker, error) {
			return pglock.New(ctx, p.DatabaseURL, pglock.WithTTL(p.TTL), pglock.WithRegisterer(p.Registerer), pglock.WithLogger(p.Logger))
		}},
		{Name: "redis", Fenced: true, Distributed: true, New: func(_ context.Context, p Params) (lock.Locker, error) {
			if len(p.RedisAddrs) == 0 {
				return nil, fmt.Errorf("%w: --lock=redis needs --redis-addrs", ErrConfig)
			}
			return redislock.New(p.RedisAddrs[0], redislock.WithTTL(p.TTL), redislock.WithRegisterer(p.Registerer),
				redislock.WithLogger(p.Logger))
		}},
		{Name: "redlock", Fenced: true, Distributed: true, New: func(_ context.Context, p Params) (lock.Locker, error) {
			if len(p.RedisAddrs) < 3 {
				return nil, fmt.Errorf("%w: --lock=redlock needs at least 3 independent masters in --redis-addrs, got %d",
					ErrConfig, len(p.RedisAddrs))
			}
			return redlock.New(p.RedisAddrs, redlock.WithTTL(p.TTL), redlock.WithRegisterer(p.Registerer), redlock.WithLogger(p.Logger))
		}},
		{Name: "zookeeper", Fenced: true, Distributed: true, New: func(_ context.Context, p Params) (lock.Locker, error) {
			if len(p.ZKServers) == 0 {
				return nil, fmt.Errorf("%w: --lock=zookeeper needs --zk-servers", ErrConfig)
			}
			return zklock.New(p.ZKServers, zklock.WithRegisterer(p.Registerer), zklock.WithLogger(p.Logger))
		}},
		{Name: "etcd", Fenced: true, Distributed: true, New: func(_ context.Context, p Params) (lock.Locker, error) {
			if len(p.EtcdEndpoints) == 0 {
				return nil, fmt.Errorf("%w: --lock=etcd needs --etcd-endpoints", ErrConfig)
			}
			opts := []etcdlock.Option{etcdlock.WithRegisterer(p.Registerer), etcdlock.WithLogger(p.Logger)}
			if p.TTL > 0 {
				opts = append(opts, etcdlock.WithSessionTTL(p.TTL))
			}
			return etcdlock.New(p.EtcdEndpoints, opts...)
		}},
	}
}

// Names lists the backends' names in table order.
func Names() []string {
	all := All()
	names := make([]string, len(all))
	for i, b := range all {
		names[i] = b.Name
	}
	return names
}

// Lookup returns the named backend.
func Lookup(name string) (Backend, error) {
	for _, b := range All() {
		if b.Name == name {
			return b, nil
		}
	}
	return Backend{}, fmt.Errorf("%w: unknown lock backend %q: want one of %s", ErrConfig, name, strings.Join(Names(), ", "))
}

// Fenced reports whether the named backend issues fencing tokens; an unknown
// name has none.
func Fenced(name string) bool {
	b, err := Lookup(name)
	return err == nil && b.Fenced
}
