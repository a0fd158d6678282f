package zklock

import (
	"fmt"
	"log/slog"
	"net"
	"strings"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/prometheus/client_golang/prometheus"
)

// Defaults of the options.
const (
	DefaultSessionTimeout = 4 * time.Second
	DefaultRoot           = "/stockguard/locks"
)

type config struct {
	sessionTimeout time.Duration
	root           string
	reg            prometheus.Registerer
	log            *slog.Logger
	dialer         zk.Dialer
}

// Option configures a Locker.
type Option func(*config)

// WithSessionTimeout sets the session timeout the Locker asks the ensemble
// for. Default: 4s. The servers clamp it to 2–20 × their tickTime, and the
// Locker works from the negotiated value: a lease lives exactly as long as the
// session, so this is also how long a dead holder blocks its keys.
func WithSessionTimeout(d time.Duration) Option {
	return func(c *config) { c.sessionTimeout = d }
}

// WithRoot sets the znode under which every key gets its own parent,
// <root>/<key>. Default: /stockguard/locks. The Locker creates it if missing.
func WithRoot(path string) Option {
	return func(c *config) { c.root = path }
}

// WithRegisterer registers the Locker's metrics on reg. Default: nil, the
// metrics are kept but exported nowhere. Several Lockers may share one
// registry; they then share the collectors.
func WithRegisterer(reg prometheus.Registerer) Option {
	return func(c *config) { c.reg = reg }
}

// WithLogger sets where session changes (suspended, resumed, lost) and the
// ZooKeeper client's own messages go. Default: nowhere.
func WithLogger(l *slog.Logger) Option {
	return func(c *config) { c.log = l }
}

// WithDialer sets how TCP connections to the servers are opened. Default:
// net.DialTimeout. Tests use it to watch the handshake or to pin every
// connection to one server.
func WithDialer(d zk.Dialer) Option {
	return func(c *config) { c.dialer = d }
}

func newConfig(opts []Option) (config, error) {
	c := config{
		sessionTimeout: DefaultSessionTimeout,
		root:           DefaultRoot,
		log:            slog.New(slog.DiscardHandler),
		dialer:         net.DialTimeout,
	}
	for _, o := range opts {
		o(&c)
	}
	if c.sessionTimeout <= 0 {
		return c, fmt.Errorf("zookeeper: session timeout %v is not positive", c.sessionTimeout)
	}
	if c.log == nil {
		c.log = slog.New(slog.DiscardHandler)
	}
	if c.dialer == nil {
		c.dialer = net.DialTimeout
	}
	if err := checkRoot(c.root); err != nil {
		return c, err
	}
	return c, nil
}

// checkRoot accepts an absolute path of valid node names with no trailing
// slash, so "<root>/<key>" is always a valid path.
func checkRoot(root string) error {
	if !strings.HasPrefix(root, "/") || root == "/" || strings.HasSuffix(root, "/") {
		return fmt.Errorf("zookeeper: root %q must be an absolute path below /, without a trailing slash", root)
	}
	for _, part := range strings.Split(root[1:], "/") {
		if err := checkName(part); err != nil {
			return fmt.Errorf("zookeeper: root %q: %w", root, err)
		}
	}
	return nil
}
