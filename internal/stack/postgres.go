package stack

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// pgBinGlob is where Debian installs each PostgreSQL major version's server
// binaries; initdb and postgres are not on PATH there.
const pgBinGlob = "/usr/lib/postgresql/*/bin"

// pgStopTimeout bounds a fast shutdown: it rolls back open transactions and
// checkpoints, which on a test cluster takes well under a second.
const pgStopTimeout = 15 * time.Second

// Postgres is a private PostgreSQL cluster owned by the caller: its own data
// directory, its own loopback port, no Unix socket, trust authentication for
// the postgres user. It runs as the postgres user when the caller is root
// (initdb refuses root). Unlike the shared stack's cluster it may be stopped
// and restarted at will. Its methods are safe for concurrent use.
type Postgres struct {
	bin     string
	data    string // removed by Close
	logPath string
	port    int
	cred    *syscall.Credential // nil: run as the caller

	mu   sync.Mutex
	proc *process
}

// StartPostgres runs initdb in a fresh data directory and starts the
// cluster with its log in dir, returning once it accepts connections. ctx
// bounds only the start-up; the cluster runs until Close.
func StartPostgres(ctx context.Context, dir string) (*Postgres, error) {
	bin, err := PGBinDir()
	if err != nil {
		return nil, err
	}
	cred, err := pgCredential()
	if err != nil {
		return nil, err
	}
	// The data directory lives under the system's temporary directory, not
	// under dir: the postgres user must be able to reach it, and dir's
	// parents are often private to the caller. Its name carries its owner,
	// so that one left by a killed test binary is swept by the next.
	data, err := newScratchDir(os.TempDir(), pgDataPrefix)
	if err != nil {
		return nil, fmt.Errorf("stack: postgres data directory: %w", err)
	}
	p := &Postgres{bin: bin, data: data, logPath: filepath.Join(dir, "postgres.log"), cred: cred}
	fail := func(err error) (*Postgres, error) {
		_ = os.RemoveAll(data)
		return nil, err
	}
	if cred != nil {
		if err := os.Chown(data, int(cred.Uid), int(cred.Gid)); err != nil {
			return fail(fmt.Errorf("stack: chown postgres data directory: %w", err))
		}
	}
	initdb := p.command(filepath.Join(bin, "initdb"), "-D", data, "-U", "postgres", "-A", "trust",
		"-E", "UTF8", "--locale=C.UTF-8", "--no-instructions", "--no-sync")
	if out, err := initdb.CombinedOutput(); err != nil {
		return fail(fmt.Errorf("stack: initdb %s: %w\n%s", data, err, out))
	}
	// A free port can be taken before postgres binds it: try a few.
	for attempt := 1; ; attempt++ {
		ports, err := freePorts(1)
		if err != nil {
			return fail(err)
		}
		p.port = ports[0]
		err = p.start(ctx)
		if err == nil {
			return p, nil
		}
		if attempt >= 3 || ctx.Err() != nil {
			return fail(err)
		}
	}
}

// PGBinDir returns the directory of the newest installed PostgreSQL major
// version's server binaries (initdb, postgres), whichever versions Debian
// has installed, as scripts/stack.sh's find_pg_bin does.
func PGBinDir() (string, error) { return pgBinDirIn(pgBinGlob) }

// pgBinDirIn is PGBinDir over the directories glob matches, their parents
// named by major version.
func pgBinDirIn(glob string) (string, error) {
	dirs, _ := filepath.Glob(glob)
	slices.SortFunc(dirs, func(a, b string) int {
		va, _ := strconv.Atoi(filepath.Base(filepath.Dir(a)))
		vb, _ := strconv.Atoi(filepath.Base(filepath.Dir(b)))
		return vb - va
	})
	for _, d := range dirs {
		if isExecutable(filepath.Join(d, "initdb")) && isExecutable(filepath.Join(d, "postgres")) {
			return d, nil
		}
	}
	return "", fmt.Errorf("stack: no PostgreSQL server binaries under %s; run scripts/stack.sh up to install them", glob)
}

func isExecutable(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0
}

// pgCredential is the postgres user's when running as root, nil otherwise.
func pgCredential() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("stack: initdb refuses root and there is no postgres user (%w); run scripts/stack.sh up to create it", err)
	}
	uid, err := strconv.ParseUint(u.Uid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("stack: postgres uid %q: %w", u.Uid, err)
	}
	gid, err := strconv.ParseUint(u.Gid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("stack: postgres gid %q: %w", u.Gid, err)
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

// command runs bin as the cluster's user, from / (the caller's working
// directory may be unreadable to that user).
func (p *Postgres) command(bin string, args ...string) *exec.Cmd {
	cmd := exec.Command(bin, args...)
	cmd.Dir = "/"
	attr := sysProcAttr()
	attr.Credential = p.cred
	cmd.SysProcAttr = attr
	return cmd
}

// start must be called with p.mu held or before p is shared.
func (p *Postgres) start(ctx context.Context) error {
	logFile, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("stack: open postgres log: %w", err)
	}
	defer logFile.Close()
	// A fast shutdown removes postmaster.pid; a killed server leaves it,
	// and postgres refuses to start over a PID it cannot prove stale.
	_ = os.Remove(filepath.Join(p.data, "postmaster.pid"))
	cmd := p.command(filepath.Join(p.bin, "postgres"), "-D", p.data,
		"-c", "listen_addresses=127.0.0.1", "-c", "port="+strconv.Itoa(p.port),
		"-c", "unix_socket_directories=", "-c", "max_connections=200",
		"-c", "shared_buffers=32MB", "-c", "logging_collector=off")
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("stack: start postgres: %w", err)
	}
	proc := &process{name: "postgres", logPath: p.logPath, cmd: cmd, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		close(proc.done)
	}()
	what := "postgres " + p.Addr()
	if err := proc.waitReady(ctx, what, func(ctx context.Context) error { return pingPostgres(ctx, p.URL("postgres")) }); err != nil {
		_ = proc.kill()
		return err
	}
	p.proc = proc
	return nil
}

// pingPostgres connects and pings; a starting server answers "the database
// system is starting up", which is an error here.
func pingPostgres(ctx context.Context, dsn string) error {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	return conn.Ping(ctx)
}

// Addr returns the server's address, 127.0.0.1:port; it does not change
// across Stop and Start.
func (p *Postgres) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(p.port)) }

// URL is the connection URL of database name as the postgres user.
func (p *Postgres) URL(name string) string {
	return "postgres://postgres@" + p.Addr() + "/" + name + "?sslmode=disable"
}

// CreateDatabase creates an empty database and returns its URL.
func (p *Postgres) CreateDatabase(ctx context.Context, name string) (string, error) {
	conn, err := pgx.Connect(ctx, p.URL("postgres"))
	if err != nil {
		return "", fmt.Errorf("stack: postgres %s: %w", p.Addr(), err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		return "", fmt.Errorf("stack: create database %s: %w", name, err)
	}
	return p.URL(name), nil
}

// PID returns the postmaster's process ID, or 0 while the server is stopped.
func (p *Postgres) PID() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.proc == nil || p.proc.exited() {
		return 0
	}
	return p.proc.pid()
}

// Stop shuts the server down fast (SIGINT): open transactions are rolled
// back, every client connection is closed with admin_shutdown, and the
// cluster checkpoints. It returns once the postmaster has exited. Stopping
// a stopped server is not an error.
func (p *Postgres) Stop() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.proc == nil || p.proc.exited() {
		return nil
	}
	if err := p.proc.signal(syscall.SIGINT); err != nil {
		return err
	}
	select {
	case <-p.proc.done:
		return nil
	case <-time.After(pgStopTimeout):
		return fmt.Errorf("stack: postgres (pid %d) still running %v after a fast shutdown request", p.proc.pid(), pgStopTimeout)
	}
}

// Start starts a stopped server again on the same port and data, returning
// once it accepts connections; starting a running server is an error.
func (p *Postgres) Start(ctx context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.proc != nil && !p.proc.exited() {
		return errors.New("stack: postgres " + p.Addr() + " is already running")
	}
	return p.start(ctx)
}

// Close kills the server and removes its data directory; it is safe to
// call more than once.
func (p *Postgres) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	var err error
	if p.proc != nil && !p.proc.exited() {
		// A fast shutdown first, so that no backend outlives the postmaster.
		if p.proc.signal(syscall.SIGINT) == nil {
			select {
			case <-p.proc.done:
			case <-time.After(pgStopTimeout):
				err = p.proc.kill()
			}
		}
	}
	if rmErr := os.RemoveAll(p.data); rmErr != nil && err == nil {
		err = fmt.Errorf("stack: remove postgres data: %w", rmErr)
	}
	return err
}
