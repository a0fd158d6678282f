package stack

import (
	"os"
	"strings"

	"github.com/stockguard/stockguard/internal/cliflag"
)

// Environment variables read by RedisAddrs, ZKServers, EtcdEndpoints and
// DatabaseURL; `eval "$(scripts/stack.sh up)"` sets all four.
const (
	EnvRedisAddrs    = "STOCKGUARD_REDIS_ADDRS"
	EnvZKServers     = "STOCKGUARD_ZK_SERVERS"
	EnvEtcdEndpoints = "STOCKGUARD_ETCD_ENDPOINTS"
	EnvDatabaseURL   = "STOCKGUARD_DATABASE_URL"
)

// Defaults match what scripts/stack.sh starts when none of its port
// variables is overridden, so tests work without the eval.
const (
	DefaultRedisAddrs    = "127.0.0.1:6391,127.0.0.1:6392,127.0.0.1:6393,127.0.0.1:6394,127.0.0.1:6395"
	DefaultZKServers     = "127.0.0.1:2181,127.0.0.1:2182,127.0.0.1:2183"
	DefaultEtcdEndpoints = "127.0.0.1:2379,127.0.0.1:2479,127.0.0.1:2579"
	DefaultDatabaseURL   = "postgres://postgres@127.0.0.1:5433/stockguard?sslmode=disable"
)

// UpCommand is the command that starts the shared stack and exports its
// addresses; error messages quote it.
const UpCommand = `eval "$(scripts/stack.sh up)"`

// RedisAddrs returns the shared stack's Redis masters (host:port), from
// STOCKGUARD_REDIS_ADDRS or DefaultRedisAddrs.
func RedisAddrs() []string {
	return cliflag.SplitList(envOr(EnvRedisAddrs, DefaultRedisAddrs))
}

// ZKServers returns the shared stack's ZooKeeper servers (host:port), from
// STOCKGUARD_ZK_SERVERS or DefaultZKServers.
func ZKServers() []string {
	return cliflag.SplitList(envOr(EnvZKServers, DefaultZKServers))
}

// EtcdEndpoints returns the shared stack's etcd members' client addresses
// (host:port), from STOCKGUARD_ETCD_ENDPOINTS or DefaultEtcdEndpoints.
func EtcdEndpoints() []string {
	return cliflag.SplitList(envOr(EnvEtcdEndpoints, DefaultEtcdEndpoints))
}

// DatabaseURL returns the shared stack's Postgres URL, from
// STOCKGUARD_DATABASE_URL or DefaultDatabaseURL.
func DatabaseURL() string {
	return envOr(EnvDatabaseURL, DefaultDatabaseURL)
}

// envOr treats a blank variable as unset: an empty STOCKGUARD_REDIS_ADDRS
// would otherwise mean "no servers", which no caller wants.
func envOr(name, def string) string {
	if v := strings.TrimSpace(os.Getenv(name)); v != "" {
		return v
	}
	return def
}
