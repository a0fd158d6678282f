package stack

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
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
// loopback only, killed when the test binary dies. Its methods are safe for
// concurrent use.
type Redis struct {
	bin  string
	dir  string
	port int
	args []string

	mu   sync.Mutex
	proc *process
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
		err := r.start(ctx)
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

// start must be called with r.mu held or before r is shared.
func (r *Redis) start(ctx context.Context) error {
	p, err := startProcess(r.bin, r.args, r.logPath())
	if err != nil {
		return err
	}
	what := "redis-server " + r.Addr()
	// Only our child may answer: servers started at once can be handed the
	// same free port, and the one that lost the bind would see the other's
	// PONG as its own.
	ours := func(ctx context.Context) error {
		pid, err := redisPID(ctx, r.Addr())
		if err == nil && pid != p.cmd.Process.Pid {
			err = fmt.Errorf("redis %s is process %d, not ours (%d): the port is taken", r.Addr(), pid, p.cmd.Process.Pid)
		}
		return err
	}
	if err := p.waitReady(ctx, what, ours); err != nil {
		_ = p.kill()
		return err
	}
	r.proc = p
	return nil
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

// PID returns the process ID of the current server process, or 0 if none
// was started.
func (r *Redis) PID() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.proc == nil {
		return 0
	}
	return r.proc.pid()
}

// Kill SIGKILLs the server (a crash: no shutdown, all data lost) and returns
// once the process is gone. Killing a dead server is not an error.
func (r *Redis) Kill() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.proc == nil {
		return nil
	}
	return r.proc.kill()
}

// Stop freezes the server with SIGSTOP: connections stay open and requests
// queue unanswered, like a long GC pause or a hung host, until Cont.
func (r *Redis) Stop() error {
	return r.signal(syscall.SIGSTOP)
}

// Cont resumes a server frozen by Stop; it then executes what it received
// while frozen.
func (r *Redis) Cont() error {
	return r.signal(syscall.SIGCONT)
}

func (r *Redis) signal(sig syscall.Signal) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.proc == nil {
		return errors.New("stack: redis-server " + r.Addr() + " was never started")
	}
	return r.proc.signal(sig)
}

// Restart kills the server if it still runs and starts a new one on the same
// port, returning once it answers PING. Without persistence it comes back
// empty: the node "forgot" every lock, as after a crash without fsync. A
// replica resyncs from its master.
func (r *Redis) Restart(ctx context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.proc != nil {
		if err := r.proc.kill(); err != nil {
			return err
		}
	}
	return r.start(ctx)
}

// Close kills the server; it is safe to call more than once.
func (r *Redis) Close() error {
	return r.Kill()
}
