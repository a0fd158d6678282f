package stack

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Debian's zookeeper.jar names its dependencies in its manifest, so the
// class path needs only a logging binding next to it (without one ZooKeeper
// logs nothing at all).
const (
	zkClassPath = "/usr/share/java/zookeeper.jar:/usr/share/java/slf4j-log4j12.jar:/usr/share/java/log4j-1.2.jar"
	zkMainClass = "org.apache.zookeeper.server.quorum.QuorumPeerMain"
)

// ZooKeeper modes reported by `srvr` once a node serves requests.
const (
	ZKLeader     = "leader"
	ZKFollower   = "follower"
	ZKStandalone = "standalone"
)

// ErrZKNotServing means the node answered but serves no requests, usually
// because it has no quorum (yet).
var ErrZKNotServing = errors.New("not serving requests")

// ZKMode asks the ZooKeeper server at addr for its mode with the `srvr`
// four-letter word: leader, follower or standalone. A node without a quorum
// answers with an error wrapping ErrZKNotServing (`ruok` would still say imok).
func ZKMode(ctx context.Context, addr string) (string, error) {
	var d net.Dialer
	return ZKModeDial(ctx, d.DialContext, addr)
}

// DialFunc opens a connection, as net.Dialer.DialContext does; a
// netns.Member's DialContext dials from inside a network namespace.
type DialFunc func(ctx context.Context, network, addr string) (net.Conn, error)

// ZKModeDial is ZKMode over a connection opened by dial, for a node that
// only a network namespace reaches.
func ZKModeDial(ctx context.Context, dial DialFunc, addr string) (string, error) {
	out, err := zkFourLetterWord(ctx, dial, addr, "srvr")
	if err != nil {
		return "", err
	}
	for line := range strings.Lines(out) {
		if mode, ok := strings.CutPrefix(strings.TrimSpace(line), "Mode: "); ok {
			return mode, nil
		}
	}
	if strings.Contains(out, "not currently serving") {
		return "", fmt.Errorf("zookeeper %s: %w", addr, ErrZKNotServing)
	}
	return "", fmt.Errorf("zookeeper %s: unexpected srvr answer %q", addr, out)
}

// zkFourLetterWord sends cmd and reads until the server closes the
// connection, which it does after every four-letter word.
func zkFourLetterWord(ctx context.Context, dial DialFunc, addr, cmd string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	conn, err := dial(ctx, "tcp", addr)
	if err != nil {
		return "", fmt.Errorf("zookeeper %s: %w", addr, err)
	}
	defer conn.Close()
	// Cancellation, not only the deadline, must end a read from a frozen node.
	defer context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Now()) })()
	if _, err := io.WriteString(conn, cmd); err != nil {
		return "", fmt.Errorf("zookeeper %s: send %s: %w", addr, cmd, err)
	}
	out, err := io.ReadAll(bufio.NewReader(conn))
	if err != nil {
		return "", fmt.Errorf("zookeeper %s: read %s answer: %w", addr, cmd, err)
	}
	return string(out), nil
}

// ZKEnsemble is a ZooKeeper ensemble of child JVMs owned by the caller,
// loopback only, killed when the test binary dies.
type ZKEnsemble struct {
	nodes []*ZKNode
}

// ZKNode is one server of a ZKEnsemble: Kill, Stop, Cont and Restart act
// on its JVM. Killed, its sessions are served by the surviving nodes while
// they keep a quorum; restarted, it keeps its data. Its methods are safe
// for concurrent use.
type ZKNode struct {
	server
	java       string
	dir        string
	myid       int
	clientPort int
}

// StartZKEnsemble starts n ZooKeeper servers (n = 1 runs standalone) with
// their configuration, data and logs under dir, and returns once every node
// reports leader or follower. ctx bounds only the start-up (at most 30 s).
// The settings match scripts/stack.sh: tickTime 200 ms, sessions 400 ms–20 s,
// no connection limit.
func StartZKEnsemble(ctx context.Context, dir string, n int) (*ZKEnsemble, error) {
	if n < 1 {
		return nil, fmt.Errorf("stack: a ZooKeeper ensemble needs at least one node, got %d", n)
	}
	java, err := exec.LookPath("java")
	if err != nil {
		return nil, fmt.Errorf("stack: java not found (%w); run scripts/stack.sh up to install it", err)
	}
	for jar := range strings.SplitSeq(zkClassPath, ":") {
		if _, err := os.Stat(jar); err != nil {
			return nil, fmt.Errorf("stack: ZooKeeper jar missing (%w); run scripts/stack.sh up to install it", err)
		}
	}
	ports, err := freePorts(3 * n) // client, quorum and election port per node
	if err != nil {
		return nil, err
	}
	var servers strings.Builder
	if n > 1 {
		for i := range n {
			fmt.Fprintf(&servers, "server.%d=127.0.0.1:%d:%d\n", i+1, ports[3*i+1], ports[3*i+2])
		}
	}

	e := &ZKEnsemble{}
	for i := range n {
		node := &ZKNode{java: java, dir: filepath.Join(dir, "zk"+strconv.Itoa(i+1)), myid: i + 1, clientPort: ports[3*i]}
		node.server = server{name: node.what, boot: node.launch, ready: func(*process) probeFunc { return node.serving }}
		if err := node.writeConfig(servers.String()); err != nil {
			return nil, err
		}
		e.nodes = append(e.nodes, node)
	}
	if err := startAll(ctx, serversOf(e.nodes)); err != nil {
		return nil, err
	}
	return e, nil
}

// Servers returns the client addresses (127.0.0.1:port) in node order.
func (e *ZKEnsemble) Servers() []string {
	out := make([]string, len(e.nodes))
	for i, node := range e.nodes {
		out[i] = node.Addr()
	}
	return out
}

// Node returns the i-th node (0-based, the order of Servers); it panics if i
// is out of range.
func (e *ZKEnsemble) Node(i int) *ZKNode {
	return e.nodes[i]
}

// Leader asks every node once and returns the index of the one that reports
// leader (or standalone). It fails if none does right now, e.g. during an
// election; use WaitLeader to wait for one.
func (e *ZKEnsemble) Leader(ctx context.Context) (int, error) {
	return leaderOf(ctx, "ZooKeeper node", len(e.nodes), func(ctx context.Context, i int) (bool, error) {
		mode, err := e.nodes[i].Mode(ctx)
		return mode == ZKLeader || mode == ZKStandalone, err
	})
}

// WaitLeader polls Leader until a node leads or ctx ends, e.g. to time an
// election after the old leader was killed.
func (e *ZKEnsemble) WaitLeader(ctx context.Context) (int, error) {
	return waitLeader(ctx, e.Leader)
}

// Close kills every node; it is safe to call more than once.
func (e *ZKEnsemble) Close() error {
	return killAll(serversOf(e.nodes))
}

// Addr returns the node's client address, 127.0.0.1:port.
func (n *ZKNode) Addr() string {
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(n.clientPort))
}

// Mode returns the node's current mode (leader, follower or standalone); see
// ZKMode.
func (n *ZKNode) Mode(ctx context.Context) (string, error) {
	return ZKMode(ctx, n.Addr())
}

func (n *ZKNode) what() string {
	return fmt.Sprintf("zookeeper node %d (%s)", n.myid, n.Addr())
}

func (n *ZKNode) serving(ctx context.Context) error {
	_, err := n.Mode(ctx)
	return err
}

func (n *ZKNode) writeConfig(servers string) error {
	return writeZKFiles(n.dir, n.myid, "127.0.0.1", n.clientPort, servers)
}

// ZKPeer is one server of an ensemble whose nodes listen on addresses the
// caller chose (a network namespace's, say) instead of loopback.
type ZKPeer struct {
	Host                                 string
	ClientPort, QuorumPort, ElectionPort int
}

// WriteZKConfig writes, under dir, the configuration of node myid (1-based)
// of the ensemble peers, with the settings of StartZKEnsemble; start it
// with ZKCommand(dir).
func WriteZKConfig(dir string, myid int, peers []ZKPeer) error {
	if myid < 1 || myid > len(peers) {
		return fmt.Errorf("stack: zookeeper myid %d of %d peers", myid, len(peers))
	}
	var servers strings.Builder
	if len(peers) > 1 {
		for i, p := range peers {
			fmt.Fprintf(&servers, "server.%d=%s:%d:%d\n", i+1, p.Host, p.QuorumPort, p.ElectionPort)
		}
	}
	me := peers[myid-1]
	return writeZKFiles(dir, myid, me.Host, me.ClientPort, servers.String())
}

// ZKCommand is the java command line of the node configured under dir by
// WriteZKConfig, for callers that start the process themselves (inside a
// network namespace); its log is dir/zookeeper.log.
func ZKCommand(dir string) (*exec.Cmd, error) {
	java, err := exec.LookPath("java")
	if err != nil {
		return nil, fmt.Errorf("stack: java not found (%w); run scripts/stack.sh up to install it", err)
	}
	return exec.Command(java, zkJavaArgs(dir)...), nil
}

func writeZKFiles(dir string, myid int, host string, clientPort int, servers string) error {
	data := filepath.Join(dir, "data")
	if err := os.MkdirAll(data, 0o755); err != nil {
		return fmt.Errorf("stack: zookeeper dir: %w", err)
	}
	files := map[string]string{
		filepath.Join(data, "myid"): strconv.Itoa(myid) + "\n",
		filepath.Join(dir, "zoo.cfg"): fmt.Sprintf(`tickTime=200
initLimit=10
syncLimit=5
dataDir=%s
clientPort=%d
clientPortAddress=%s
minSessionTimeout=400
maxSessionTimeout=20000
maxClientCnxns=0
admin.enableServer=false
4lw.commands.whitelist=ruok,srvr,stat,mntr,cons
preAllocSize=4096
%s`, data, clientPort, host, servers),
		filepath.Join(dir, "log4j.properties"): fmt.Sprintf(`log4j.rootLogger=INFO, F
log4j.appender.F=org.apache.log4j.FileAppender
log4j.appender.F.File=%s
log4j.appender.F.layout=org.apache.log4j.PatternLayout
log4j.appender.F.layout.ConversionPattern=%%d{ISO8601} [myid:%%X{myid}] %%-5p [%%t:%%C{1}@%%L] - %%m%%n
`, filepath.Join(dir, "zookeeper.log")),
	}
	for path, content := range files {
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			return fmt.Errorf("stack: write zookeeper config: %w", err)
		}
	}
	return nil
}

// ZKContainerCheckMillis is how often the ensembles started here reap
// emptied container znodes.
const ZKContainerCheckMillis = 1000

func zkJavaArgs(dir string) []string {
	return []string{
		// A small heap, the serial GC and C1 alone keep several test JVMs
		// within 2 cores, as scripts/stack.sh does (see there for C1).
		"-Xms32m", "-Xmx256m", "-XX:+UseSerialGC", "-XX:-UsePerfData", "-XX:TieredStopAtLevel=1",
		"-Djava.net.preferIPv4Stack=true",
		// No worker pools between the selector, the commit processor and
		// the work: a thread hand-off fewer a request (see scripts/stack.sh).
		"-Dzookeeper.nio.numWorkerThreads=0", "-Dzookeeper.commitProcessor.numWorkerThreads=0",
		// Lock parents are containers. These ensembles live for one test:
		// reap emptied parents within seconds (the server's default is a
		// minute, as scripts/stack.sh keeps) so that tests can see it.
		"-Dznode.container.checkIntervalMs=" + strconv.Itoa(ZKContainerCheckMillis),
		"-Dznode.container.maxNeverUsedIntervalMs=60000",
		"-Dlog4j.configuration=file:" + filepath.Join(dir, "log4j.properties"),
		"-cp", zkClassPath,
		zkMainClass, filepath.Join(dir, "zoo.cfg"),
	}
}

func (n *ZKNode) launch() (*process, error) {
	args := zkJavaArgs(n.dir)
	// The JVM's own output is small (start-up errors); the server log is
	// zookeeper.log, and the tail quoted on failure comes from there.
	p, err := startProcess(n.java, args, filepath.Join(n.dir, "zookeeper.log"))
	if err != nil {
		return nil, err
	}
	return p, nil
}
