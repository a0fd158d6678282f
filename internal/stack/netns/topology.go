//go:build linux

package netns

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sync"
)

// subnet is the members' subnet: the RFC 2544 benchmarking range, which is
// routed nowhere, so a member address can never be confused with a real
// host. Each Topology has its own bridge, so parallel topologies reuse it
// without conflict. The first member gets the first host address, and so
// on.
var subnet = netip.MustParsePrefix("198.18.0.0/24")

// memberName limits member names to what is safe in a namespace name and a
// log line.
var memberName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_]{0,31}$`)

// Option configures New.
type Option func(*config)

type config struct {
	prefix string
}

// WithPrefix starts every namespace name with prefix instead of
// DefaultPrefix; tests use their own so that their Sweep sees nobody else's.
func WithPrefix(prefix string) Option { return func(c *config) { c.prefix = prefix } }

// Topology is a bridge namespace and member namespaces joined to it. Its
// methods are safe for concurrent use.
type Topology struct {
	runID   string
	bridge  string
	members map[string]*Member
	order   []string // member names in the order given to New

	mu        sync.Mutex
	procs     []*Process
	dirs      []string // TempDir's, removed by Close
	closed    bool
	closeOnce sync.Once
	closeErr  error
}

// Member is one namespace on the bridge.
type Member struct {
	name      string
	namespace string
	addr      netip.Addr
}

// Name is the member's name as given to New.
func (m *Member) Name() string { return m.name }

// Namespace is the member's network namespace name (for `ip netns exec`).
func (m *Member) Namespace() string { return m.namespace }

// Addr is the member's address on the bridge.
func (m *Member) Addr() netip.Addr { return m.addr }

// New builds a topology with one member per name, after EnsureTools. When
// any step fails, everything made so far is removed before New returns.
// The caller must Close the topology (defer it, and trap SIGINT so an
// interrupt reaches the deferred Close).
func New(ctx context.Context, names []string, opts ...Option) (*Topology, error) {
	cfg := config{prefix: DefaultPrefix}
	for _, o := range opts {
		o(&cfg)
	}
	if err := validate(cfg, names); err != nil {
		return nil, err
	}
	if err := EnsureTools(ctx); err != nil {
		return nil, err
	}
	runID, err := newRunID(cfg.prefix)
	if err != nil {
		return nil, err
	}
	t := &Topology{
		runID:   runID,
		bridge:  runID + "-" + bridgeSuffix,
		members: make(map[string]*Member, len(names)),
		order:   slices.Clone(names),
	}
	addr := subnet.Addr()
	for _, n := range names {
		addr = addr.Next()
		t.members[n] = &Member{name: n, namespace: runID + "-" + n, addr: addr}
	}
	if err := t.build(ctx, subnet.Bits()); err != nil {
		return nil, errors.Join(err, t.Close())
	}
	return t, nil
}

func validate(cfg config, names []string) error {
	if cfg.prefix == "" {
		return errors.New("netns: empty prefix")
	}
	if len(names) == 0 {
		return errors.New("netns: a topology needs at least one member")
	}
	// Host addresses exclude the network and broadcast addresses.
	if hosts := (1 << (32 - subnet.Bits())) - 2; len(names) > hosts {
		return fmt.Errorf("netns: %d members do not fit in %v (%d addresses)", len(names), subnet, hosts)
	}
	seen := make(map[string]bool, len(names))
	for _, n := range names {
		if !memberName.MatchString(n) || n == bridgeSuffix {
			return fmt.Errorf("netns: member name %q: want %s, not %q", n, memberName, bridgeSuffix)
		}
		if seen[n] {
			return fmt.Errorf("netns: member %q named twice", n)
		}
		seen[n] = true
	}
	return nil
}

// build creates the namespaces, the bridge and one veth pair per member.
// Each veth is created inside the bridge namespace with its peer created
// directly in the member's namespace, so no interface ever appears on the
// host.
func (t *Topology) build(ctx context.Context, bits int) error {
	if _, err := run(ctx, "", "ip", "netns", "add", t.bridge); err != nil {
		return err
	}
	hub := []string{"link set lo up", "link add br0 type bridge", "link set br0 up"}
	for i, n := range t.order {
		m := t.members[n]
		if _, err := run(ctx, "", "ip", "netns", "add", m.namespace); err != nil {
			return err
		}
		port := fmt.Sprintf("p%d", i)
		hub = append(hub,
			fmt.Sprintf("link add %s type veth peer name eth0 netns %s", port, m.namespace),
			fmt.Sprintf("link set %s master br0", port),
			fmt.Sprintf("link set %s up", port))
	}
	if err := ipBatch(ctx, t.bridge, hub); err != nil {
		return err
	}
	for _, n := range t.order {
		m := t.members[n]
		if err := ipBatch(ctx, m.namespace, []string{
			"link set lo up",
			fmt.Sprintf("addr add %s/%d dev eth0", m.addr, bits),
			"link set eth0 up",
		}); err != nil {
			return err
		}
	}
	return nil
}

// Member returns the member called name, or nil.
func (t *Topology) Member(name string) *Member { return t.members[name] }

// Members returns the members in the order given to New.
func (t *Topology) Members() []*Member {
	out := make([]*Member, 0, len(t.order))
	for _, n := range t.order {
		out = append(out, t.members[n])
	}
	return out
}

// Namespaces returns every namespace name of the topology, bridge included.
func (t *Topology) Namespaces() []string {
	out := []string{t.bridge}
	for _, m := range t.Members() {
		out = append(out, m.namespace)
	}
	return out
}

// member looks name up, for the methods that take member names.
func (t *Topology) member(name string) (*Member, error) {
	m := t.members[name]
	if m == nil {
		return nil, fmt.Errorf("netns: no member %q in %s", name, t.runID)
	}
	return m, nil
}

// TempDir creates a directory for files that live as long as the topology
// (a server's data, say): os.TempDir()/<the topology's run id>-<name>, so
// that it carries the same owner as the namespaces. Close removes it once
// the processes are dead; Sweep removes it, with the namespaces, once its
// owner is. name follows the rules of member names.
func (t *Topology) TempDir(name string) (string, error) {
	if !memberName.MatchString(name) {
		return "", fmt.Errorf("netns: temp dir name %q: want %s", name, memberName)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return "", errClosed
	}
	dir := filepath.Join(os.TempDir(), t.runID+"-"+name)
	if err := os.Mkdir(dir, 0o700); err != nil {
		return "", fmt.Errorf("netns: temp dir: %w", err)
	}
	t.dirs = append(t.dirs, dir)
	return dir, nil
}

// Close kills every process started in the topology, then every other
// process left in its namespaces, deletes the namespaces (and with them
// the veths, the bridge and the nftables rules) and then its TempDirs,
// which no process can be writing to any more. It is safe to call more
// than once and from several goroutines; later calls return the first
// call's error. Close uses its own bounded waits, not a caller's context, so
// that it still works after the caller's context was cancelled by an
// interrupt.
func (t *Topology) Close() error {
	t.closeOnce.Do(func() {
		t.mu.Lock()
		t.closed = true
		procs, dirs := slices.Clone(t.procs), slices.Clone(t.dirs)
		t.mu.Unlock()
		var errs []error
		for _, p := range procs {
			if err := p.Kill(); err != nil {
				errs = append(errs, err)
			}
		}
		ctx := context.Background()
		// Members first: deleting a member's namespace destroys its veth
		// end, and with it the peer on the bridge.
		names := t.Namespaces()
		for i := len(names) - 1; i >= 0; i-- {
			if err := removeNamespace(ctx, names[i]); err != nil {
				errs = append(errs, err)
			}
		}
		for _, d := range dirs {
			if err := os.RemoveAll(d); err != nil {
				errs = append(errs, fmt.Errorf("netns: remove temp dir: %w", err))
			}
		}
		t.closeErr = errors.Join(errs...)
	})
	return t.closeErr
}
