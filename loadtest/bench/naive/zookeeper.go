package naive

import (
	"context"
	"fmt"
	"log"
	"strings"
	"sync/atomic"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/google/uuid"
)

// zkConns is how many ZooKeeper sessions the loop's goroutines share. One
// session orders all its requests, which would measure one session's
// pipeline rather than the lock; one per goroutine (64) comes near the
// servers' 60-connections-per-address limit that the service's instances
// and other tests share.
const zkConns = 8

// ZooKeeper is go-zookeeper's lock recipe, zk.NewLock, on an ensemble.
type ZooKeeper struct {
	conns []*zk.Conn
	next  atomic.Uint64
	root  string // every lock of this Locker lives under it
}

// NewZooKeeper opens the sessions and waits until the first has one.
func NewZooKeeper(ctx context.Context, servers []string) (*ZooKeeper, error) {
	z := &ZooKeeper{root: "/stockguard-naive-" + strings.ReplaceAll(uuid.NewString(), "-", "")[:12]}
	for range zkConns {
		c, events, err := zk.Connect(servers, 10*time.Second, zk.WithLogInfo(false), zk.WithLogger(log.New(nopWriter{}, "", 0)))
		if err != nil {
			z.Close()
			return nil, fmt.Errorf("naive zookeeper: %w", err)
		}
		z.conns = append(z.conns, c)
		if err := awaitSession(ctx, events); err != nil {
			z.Close()
			return nil, fmt.Errorf("naive zookeeper %s: %w (start the stack: eval \"$(bash scripts/stack.sh up)\")", strings.Join(servers, ","), err)
		}
	}
	return z, nil
}

type nopWriter struct{}

func (nopWriter) Write(p []byte) (int, error) { return len(p), nil }

// awaitSession waits for the session, at most 10 s.
func awaitSession(ctx context.Context, events <-chan zk.Event) error {
	t := time.NewTimer(10 * time.Second)
	defer t.Stop()
	for {
		select {
		case ev := <-events:
			if ev.State == zk.StateHasSession {
				// The channel must keep being drained, or the client blocks.
				go func() {
					for range events {
					}
				}()
				return nil
			}
		case <-t.C:
			return fmt.Errorf("no session within 10s")
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Name implements Locker.
func (z *ZooKeeper) Name() string { return "go-zookeeper zk.Lock" }

// Lock implements Locker. zk.Lock takes no context: a waiter waits until
// its turn, which the other goroutines' releases bring within a few
// cycles; ctx is checked before the wait.
func (z *ZooKeeper) Lock(ctx context.Context, key string) (func() error, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	c := z.conns[z.next.Add(1)%uint64(len(z.conns))]
	l := zk.NewLock(c, z.root+"/"+key, zk.WorldACL(zk.PermAll))
	if err := l.Lock(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrLockFailed, err)
	}
	return func() error {
		if err := l.Unlock(); err != nil {
			// The node lives as long as its session, and the next Lock of
			// its key waits for it without a deadline: the session goes,
			// taking the node along (the loop stops on this error).
			c.Close()
			return fmt.Errorf("naive zookeeper: unlock: %w (its session closed)", err)
		}
		return nil
	}, nil
}

// Close deletes the lock nodes' parents it created and closes the
// sessions. The lock nodes themselves are ephemeral and already gone.
func (z *ZooKeeper) Close() {
	if len(z.conns) > 0 {
		c := z.conns[0]
		keys, _, err := c.Children(z.root)
		if err == nil {
			for _, k := range keys {
				_ = c.Delete(z.root+"/"+k, -1)
			}
			_ = c.Delete(z.root, -1)
		}
	}
	for _, c := range z.conns {
		c.Close()
	}
}
