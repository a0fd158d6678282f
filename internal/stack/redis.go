package stack

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// PingRedis reports whether the Redis server at addr answers PING before ctx
// ends (at most 2 s).
func PingRedis(ctx context.Context, addr string) error {
	c := redis.NewClient(&redis.Options{
		Addr:                  addr,
		DialTimeout:           2 * time.Second,
		ReadTimeout:           2 * time.Second,
		WriteTimeout:          2 * time.Second,
		ContextTimeoutEnabled: true, // else a SIGSTOPped server blocks past ctx
		MaxRetries:            -1,
		DialerRetries:         1, // the caller polls; retries would outlast its deadline
		PoolSize:              1,
		DisableIdentity:       true,
	})
	defer c.Close()
	if err := c.Ping(ctx).Err(); err != nil {
		return fmt.Errorf("redis %s: PING: %w", addr, err)
	}
	return nil
}

// RedisOption configures StartRedis.
type RedisOption func(*redisConfig)

type redisConfig struct {
	port      int
	replicaOf string
}

// RedisPort makes the server listen on port instead of a free one; Restart
// always reuses the port, whichever way it was chosen.
func RedisPort(port int) RedisOption {
	return func(c *redisConfig) { c.port = port }
}

// RedisReplicaOf starts the server as a replica of the master at addr
// (host:port), for failover scenarios.
func RedisReplicaOf(addr string) RedisOption {
	return func(c *redisConfig) { c.replicaOf = addr }
}

// Redis is a redis-server child process owned by the caller: no persistence,
// loopback only, killed when the test binary dies. Kill loses all its data;
// Restart reuses the port and comes back empty, as after a crash without
// fsync, the node having "forgotten" every lock (a replica resyncs from its
// master). Its methods are safe for concurrent use.
type Redis struct {
	server
	bin  string
	dir  string
	port int
	args []string
}

// StartRedis starts redis-server with its working directory and log in dir
// and returns once it answers PING. ctx bounds only the start-up (at most
// 30 s); the server runs until Kill or Close.
func StartRedis(ctx context.Context, dir string, opts ...RedisOption) (*Redis, error) {
	var cfg redisConfig
	for _, o := range opts {
		o(&cfg)
	}
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, fmt.Errorf("stack: redis-server not found (%w); run scripts/stack.sh up to install it", err)
	}
	var replicaArgs []string
	if cfg.replicaOf != "" {
		host, port, err := net.SplitHostPort(cfg.replicaOf)
		if err != nil {
			return nil, fmt.Errorf("stack: replica-of address %q: %w", cfg.replicaOf, err)
		}
		replicaArgs = []string{"--replicaof", host, port}
	}

	// A free port can be taken by someone else before redis-server binds it;
	// a few fresh ports make that race harmless when the caller did not ask
	// for a particular one.
	attempts := 3
	if cfg.port != 0 {
		attempts = 1
	}
	for attempt := 1; ; attempt++ {
		port := cfg.port
		if port == 0 {
			ports, err := freePorts(1)
			if err != nil {
				return nil, err
			}
			port = ports[0]
		}
		r := &Redis{bin: bin, dir: dir, port: port}
		r.args = append([]string{
			"--port", strconv.Itoa(port),
			"--bind", "127.0.0.1",
			"--save", "",
			"--appendonly", "no",
			"--daemonize", "no",
			// Replicas of this server sync at once instead of after 5 s.
			"--repl-diskless-sync-delay", "0",
			"--dir", dir,
			"--logfile", r.logPath(),
		}, replicaArgs...)
		r.server = server{name: func() string { return "redis-server " + r.Addr() },
			boot: func() (*process, error) { return startProcess(r.bin, r.args, r.logPath()) }, ready: r.ours}
		err := r.startLocked(ctx)
		if err == nil {
			return r, nil
		}
		if attempt >= attempts || ctx.Err() != nil {
			return nil, err
		}
	}
}

func (r *Redis) logPath() string {
	return filepath.Join(r.dir, "redis-"+strconv.Itoa(r.port)+".log")
}

// ours is the probe that p, and only p, answers at r's address: servers
// started at once can be handed the same free port, and the one that lost
// the bind would see the other's answer as its own.
func (r *Redis) ours(p *process) probeFunc {
	return func(ctx context.Context) error {
		pid, err := redisPID(ctx, r.Addr())
		if err == nil && pid != p.pid() {
			err = fmt.Errorf("redis %s is process %d, not ours (%d): the port is taken", r.Addr(), pid, p.pid())
		}
		return err
	}
}

// redisPID asks the server at addr for its process id (INFO server), over
// a bare connection: polling a starting server with go-redis would log
// every refused dial, and its handshake can outlast ctx.
func redisPID(ctx context.Context, addr string) (int, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	defer context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Now()) })()
	if _, err := io.WriteString(conn, "INFO server\r\n"); err != nil {
		return 0, err
	}
	br := bufio.NewReader(conn)
	head, err := br.ReadString('\n')
	if err != nil {
		return 0, fmt.Errorf("redis %s: INFO: %w", addr, err)
	}
	if !strings.HasPrefix(head, "$") {
		return 0, fmt.Errorf("redis %s: INFO answered %q", addr, strings.TrimSpace(head))
	}
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			return 0, fmt.Errorf("redis %s: INFO without process_id: %w", addr, err)
		}
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "process_id:"); ok {
			return strconv.Atoi(v)
		}
	}
}

// Addr returns the server's address, 127.0.0.1:port; it does not change
// across Restart.
func (r *Redis) Addr() string {
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(r.port))
}

// Close kills the server; it is safe to call more than once.
func (r *Redis) Close() error {
	return r.Kill()
}
