package chaos

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/stockguard/stockguard/internal/stack"
	"github.com/stockguard/stockguard/internal/stack/netns"
)

const pgPort = 5432

// postgresServer is a partition scenario's own PostgreSQL cluster: a
// scratch data directory owned by the postgres user (initdb and postgres
// refuse to run as root), the server inside a member. The shared stack's
// database is never used, so a partition cuts the instances' only store.
type postgresServer struct {
	// dir is the scratch directory, outside the run's log directory (which
	// postgres cannot enter); the topology removes it.
	dir string
	url string

	rig *netRig
	// bin holds initdb and postgres, of whichever major version is
	// installed (stack.PGBinDir).
	bin                   string
	member, data, logPath string
	proc                  *netns.Process
}

// startPostgres initdb's a cluster and runs postgres inside member, its
// log in logDir/postgres.log, and waits until it accepts connections from
// the load tester's member. Durability is off: the cluster lives as long as
// one run.
func startPostgres(ctx context.Context, r *netRig, member, logDir string) (*postgresServer, error) {
	pgUser, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("postgres user: %w (apt-get install -y postgresql)", err)
	}
	bin, err := stack.PGBinDir()
	if err != nil {
		return nil, err
	}
	uid, _ := strconv.Atoi(pgUser.Uid)
	gid, _ := strconv.Atoi(pgUser.Gid)
	// The topology's, so that a crashed run's is swept with its namespaces.
	dir, err := r.topo.TempDir("pg")
	if err != nil {
		return nil, err
	}
	s := &postgresServer{dir: dir, bin: bin}
	if err := os.Chown(dir, uid, gid); err != nil {
		return s, fmt.Errorf("postgres scratch dir: %w", err)
	}
	data := filepath.Join(dir, "data")
	initdb := exec.CommandContext(ctx, "setpriv", asPostgres(filepath.Join(bin, "initdb"), "-D", data, "-U", "postgres",
		"--auth=trust", "--no-sync", "--encoding=UTF8", "--locale=C")...)
	if out, err := initdb.CombinedOutput(); err != nil {
		return s, fmt.Errorf("initdb: %w: %s", err, out)
	}
	// initdb trusts loopback only; the clients are the other members, on
	// the topology's subnet, which the server is directly connected to.
	hba, err := os.OpenFile(filepath.Join(data, "pg_hba.conf"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return s, fmt.Errorf("pg_hba.conf: %w", err)
	}
	_, err = hba.WriteString("host all all samenet trust\n")
	if cerr := hba.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return s, fmt.Errorf("pg_hba.conf: %w", err)
	}
	s.url = fmt.Sprintf("postgres://postgres@%s/postgres?sslmode=disable", r.addr(member, pgPort))
	s.rig, s.member, s.data, s.logPath = r, member, data, filepath.Join(logDir, "postgres.log")
	return s, s.Start(ctx)
}

// asPostgres is the setpriv command line that runs the program at path as
// the postgres user; setpriv execs in place (no fork, unlike runuser), so
// the PID the topology holds is postgres's own. The kernel clears the
// parent-death signal when the user changes: --pdeathsig=keep sets it again,
// so that postgres still dies with the load tester (netns.Topology.Start).
func asPostgres(path string, args ...string) []string {
	return append([]string{"--reuid=postgres", "--regid=postgres", "--init-groups", "--pdeathsig=keep", "--", path}, args...)
}

// Start runs postgres on the cluster inside its member and waits until it
// accepts connections from the load tester's member.
func (s *postgresServer) Start(ctx context.Context) error {
	r := s.rig
	addr := r.topo.Member(s.member).Addr().String()
	p, err := r.startLogged(s.member, exec.Command("setpriv", asPostgres(filepath.Join(s.bin, "postgres"), "-D", s.data,
		"-c", "listen_addresses="+addr, "-p", strconv.Itoa(pgPort), "-c", "unix_socket_directories="+s.dir,
		"-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off",
		"-c", "max_connections=200")...), s.logPath)
	if err != nil {
		return err
	}
	s.proc = p
	cfg, err := pgx.ParseConfig(s.url)
	if err != nil {
		return err
	}
	cfg.DialFunc = r.dial
	return waitUp(ctx, "postgres "+addr, p, s.logPath, serverStartLimit, func(ctx context.Context) error {
		conn, err := pgx.ConnectConfig(ctx, cfg)
		if err != nil {
			return err
		}
		defer conn.Close(context.WithoutCancel(ctx))
		return conn.Ping(ctx)
	})
}

// pgStopLimit bounds a fast shutdown: open transactions are rolled back and
// connections closed at once, so it takes a second or two under load.
const pgStopLimit = 30 * time.Second

// Stop is a fast shutdown (SIGINT): open transactions roll back, every
// connection is closed; it returns once postgres has exited.
func (s *postgresServer) Stop() error {
	if err := s.proc.Signal(syscall.SIGINT); err != nil {
		return err
	}
	select {
	case <-s.proc.Done():
		return nil
	case <-time.After(pgStopLimit):
		return errors.Join(fmt.Errorf("postgres did not stop within %v of SIGINT; killed", pgStopLimit), s.proc.Kill())
	}
}

// PID is the running postgres's process id.
func (s *postgresServer) PID() int { return s.proc.PID() }
